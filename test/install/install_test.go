// Package install_test has the API server check the install overlays of
// config/: config/default with a server-side dry run, config/namespaced's
// RBAC installed for real and asked about through SubjectAccessReviews.
// No manager runs.
package install_test

import (
	"context"
	"os"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{Name: "install", ProductCRDs: true}))
}

// TestKustomizeDefaultDryRun has the API server check config/default (CRDs,
// RBAC, the manager Deployment, the admission policies, the sidecar
// injection policy and its parameters) without creating anything. The namespace
// must exist for the namespaced objects, so the test creates it.
func TestKustomizeDefaultDryRun(t *testing.T) {
	env := testenv.Get(t)
	k8s := env.Client
	sys := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvhint-system"}}
	if err := k8s.Create(context.Background(), sys); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	out, err := env.RunKubectl("apply", "-k", "../../config/default", "--dry-run=server")
	if err != nil {
		t.Fatalf("kubectl apply -k config/default --dry-run=server: %v\n%s", err, out)
	}
	for _, want := range []string{
		"customresourcedefinition.apiextensions.k8s.io/routerroles.hints.kvrouter.io",
		"customresourcedefinition.apiextensions.k8s.io/hintpolicies.hints.kvrouter.io",
		"customresourcedefinition.apiextensions.k8s.io/routerrollouts.hints.kvrouter.io",
		"clusterrole.rbac.authorization.k8s.io/kvhint-manager",
		"deployment.apps/kvhint-manager",
		"service/kvhint-manager-metrics",
		"clusterrole.rbac.authorization.k8s.io/kvhint-metrics-reader",
		"validatingadmissionpolicy.admissionregistration.k8s.io/kvhint-sidecar-pod-report",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/kvhint-sidecar-pod-report",
		"validatingadmissionpolicy.admissionregistration.k8s.io/kvhint-applied-hash-writers",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/kvhint-applied-hash-writers",
		"mutatingadmissionpolicy.admissionregistration.k8s.io/kvhint-sidecar-injection",
		"mutatingadmissionpolicybinding.admissionregistration.k8s.io/kvhint-sidecar-injection",
		"configmap/kvhint-sidecar-injection",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

// TestNamespacedInstallCannotTouchOtherNamespaces installs the RBAC of
// config/namespaced for real and asks the API server's authorizer what the
// manager's ServiceAccount may do (issue item 6): ConfigMaps and pods in
// the router namespace, nothing of them in kube-system or elsewhere, and
// the metrics reviews. The rest of the overlay is checked with a server
// side dry run.
func TestNamespacedInstallCannotTouchOtherNamespaces(t *testing.T) {
	env := testenv.Get(t)
	k8s := env.Client
	ctx := context.Background()
	for _, name := range []string{"kvhint-system", "routers"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	out, err := env.RunKubectl("apply", "-k", "../../config/namespaced", "--dry-run=server")
	if err != nil {
		t.Fatalf("kubectl apply -k config/namespaced --dry-run=server: %v\n%s", err, out)
	}
	if strings.Contains(out, "clusterrolebinding.rbac.authorization.k8s.io/kvhint-manager ") {
		t.Errorf("config/namespaced binds the manager's role cluster-wide:\n%s", out)
	}

	rendered, err := env.RunKubectl("kustomize", "../../config/namespaced")
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, rendered)
	}
	objs, err := testenv.Objects([]byte(rendered))
	if err != nil {
		t.Fatalf("kubectl kustomize config/namespaced: %v", err)
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}

	const manager = "system:serviceaccount:kvhint-system:kvhint-manager"
	for _, tc := range []struct {
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "patch", Resource: "configmaps"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "watch", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "list", Group: "hints.kvrouter.io", Resource: "routerroles"}, true},
		// RouterRollouts: their status is the manager's; of the object it
		// only removes the manual-control annotations it acted on.
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "patch", Group: "hints.kvrouter.io", Resource: "routerrollouts", Subresource: "status"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "patch", Group: "hints.kvrouter.io", Resource: "routerrollouts"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "delete", Group: "hints.kvrouter.io", Resource: "routerrollouts"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "create", Group: "hints.kvrouter.io", Resource: "routerrollouts"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "patch", Resource: "configmaps"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "delete", Resource: "configmaps"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "default", Verb: "list", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}, false}, // all namespaces
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "get", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "routers", Verb: "get", Resource: "secrets"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: manager, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kvhint-system", "system:authenticated"},
			ResourceAttributes: &tc.attrs,
		}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s in %q: allowed %v; want %v", tc.attrs.Verb, tc.attrs.Group, tc.attrs.Resource, tc.attrs.Namespace, sar.Status.Allowed, tc.allowed)
		}
	}
}
