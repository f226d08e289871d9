package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
)

// graphManifest is a DGD of router llama with a frontend (container main
// and a sidecar "other" that names a policy file of its own) and a
// worker; opted in when optIn.
func graphManifest(name string, optIn bool) *unstructured.Unstructured {
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
		"metadata": map[string]any{"name": name, "labels": map[string]any{v1alpha1.RouterLabel: "llama"}},
		"spec": map[string]any{
			"env": []any{map[string]any{"name": "DYN_ROUTER_MODE", "value": "kv"}},
			"components": []any{
				map[string]any{"name": "frontend", "type": "frontend", "replicas": int64(2), "podTemplate": map[string]any{
					"metadata": map[string]any{"labels": map[string]any{v1alpha1.RouterLabel: "llama"}},
					"spec": map[string]any{
						"containers": []any{
							map[string]any{"name": "main", "image": "frontend:1"},
							map[string]any{"name": "other", "image": "other:1", "env": []any{map[string]any{"name": "DYN_ROUTER_POLICY_CONFIG", "value": "/etc/other.yaml"}}},
						},
					},
				}},
				map[string]any{"name": "worker", "type": "worker", "replicas": int64(1), "podTemplate": map[string]any{
					"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "worker:1"}}},
				}},
			},
		},
	}}
	if optIn {
		g.SetAnnotations(map[string]string{v1alpha1.RouterComponentAnnotation: ""})
	}
	return g
}

// TestManagerWritesOnlyTheGraphEntries is the attack on the manager's
// right to patch DynamoGraphDeployments: with its token alone one could
// change any DGD's images, replicas or commands. With config/admission,
// the manager's identity (a token bound to the manager's pod) may write
// only its three entries in a component podTemplate of an opted-in DGD.
func TestManagerWritesOnlyTheGraphEntries(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	if err := suite.InstallDynamoCRD(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"kvhint-system", "graphs"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"service_account.yaml", "role.yaml", "role_binding.yaml"} {
		suite.Kubectl(t, "apply", "-f", repo+"/config/rbac/"+f)
	}
	suite.Kubectl(t, "apply", "-k", repo+"/config/admission")

	managerPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kvhint-manager-graphs"},
		Spec: corev1.PodSpec{ServiceAccountName: "kvhint-manager", AutomountServiceAccountToken: ptrTo(false),
			Containers: []corev1.Container{{Name: "manager", Image: "kvhint:test"}}},
	}
	managerPod, err := admin.CoreV1().Pods("kvhint-system").Create(ctx, managerPod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manager := dynamicFor(t, tokenConfig(t, "kvhint-system", "kvhint-manager", managerPod))
	owner := dynamicFor(t, restCfg)
	const ns = "graphs"
	graphs := func(c *dynamic.DynamicClient) dynamic.ResourceInterface {
		return c.Resource(dynamograph.GroupVersion.WithResource(dynamograph.Resource)).Namespace(ns)
	}
	// The CRD is served a moment after it is created.
	deadline := time.Now().Add(30 * time.Second)
	// A router whose name has a dot: its revisions are
	// llama.v2-hints-<hash>, and a "." must match only a dot.
	dotted := graphManifest("dotted", true)
	dotted.SetLabels(map[string]string{v1alpha1.RouterLabel: "llama.v2"})
	// A DGD that names its router component, a worker with a Frontend
	// sidecar (container "router"), in the opt-in annotation.
	named := graphManifest("named", true)
	named.SetAnnotations(map[string]string{v1alpha1.RouterComponentAnnotation: "worker"})
	comps, _, _ := unstructured.NestedSlice(named.Object, "spec", "components")
	worker := comps[1].(map[string]any)
	worker["frontendSidecar"] = "router"
	wspec := worker["podTemplate"].(map[string]any)["spec"].(map[string]any)
	wspec["containers"] = append(wspec["containers"].([]any), map[string]any{"name": "router", "image": "frontend:1"})
	if err := unstructured.SetNestedSlice(named.Object, comps, "spec", "components"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*unstructured.Unstructured{graphManifest("opted-in", true), graphManifest("not-opted-in", false), dotted, named} {
		for {
			_, err := graphs(owner).Create(ctx, g, metav1.CreateOptions{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("creating DGD %s: %v", g.GetName(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	const revision = "llama-hints-0123456789abcdef"
	apply := func(name, component, rev, container string) func() error {
		return func() error {
			u, err := workload.GraphEntries(ns, name, component, rev, container)
			if err != nil {
				return err
			}
			js, err := json.Marshal(u)
			if err != nil {
				return err
			}
			_, err = graphs(manager).Patch(ctx, name, types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: v1alpha1.RolloutFieldManager, Force: ptrTo(true)})
			return err
		}
	}
	patch := func(name, p string) func() error {
		return func() error {
			_, err := graphs(manager).Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
			return err
		}
	}
	// The policy takes effect a moment after it is created.
	for {
		_, err := graphs(manager).Patch(ctx, "not-opted-in", types.MergePatchType, []byte(`{"spec":{"backendFramework":"vllm"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "kvhint-manager-graphs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy does not refuse the manager writing a DGD that did not opt in: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	workerImage := `{"spec":{"components":[{"name":"frontend","type":"frontend"},{"name":"worker","type":"worker","podTemplate":{"spec":{"containers":[{"name":"main","image":"evil:1"}]}}}]}}`
	for _, tc := range []struct {
		name    string
		write   func() error
		allowed bool
		says    string
	}{
		{"its three entries in the frontend of an opted-in DGD", apply("opted-in", "frontend", revision, "main"), true, ""},
		{"its three entries again, on the next revision", apply("opted-in", "frontend", "llama-hints-fedcba9876543210", "main"), true, ""},
		{"its volume on another ConfigMap", apply("opted-in", "frontend", "someone-elses", "main"), false, "on a config revision llama-hints-<hash>"},
		{"its variable over one the container sets", apply("opted-in", "frontend", revision, "other"), false, "where the container sets none"},
		{"its three entries in the worker component", apply("opted-in", "worker", revision, "main"), false, "only in its router component frontend, container main"},
		{"its three entries in the component the opt-in names, its Frontend sidecar", apply("named", "worker", revision, "router"), true, ""},
		{"its three entries in the frontend, when the opt-in names the worker", apply("named", "frontend", revision, "main"), false, "only in its router component worker, container router"},
		{"its three entries in the worker's main container, when the opt-in names the worker", apply("named", "worker", revision, "main"), false, "only in its router component worker, container router"},
		{"its volume on a ConfigMap of the router llama.v2, literally", apply("dotted", "frontend", "llama.v2-hints-0123456789abcdef", "main"), true, ""},
		{"its volume on a ConfigMap that matches llama.v2 only as a pattern", apply("dotted", "frontend", "llamaXv2-hints-0123456789abcdef", "main"), false, "on a config revision llama.v2-hints-<hash>"},
		{"the replicas of a component", patch("opted-in", `{"spec":{"components":[{"name":"frontend","type":"frontend","replicas":9},{"name":"worker","type":"worker","replicas":1}]}}`), false, "its components"},
		{"the image of another component", patch("opted-in", workerImage), false, "the rest of their pod templates"},
		{"the graph-wide env", patch("opted-in", `{"spec":{"env":[{"name":"DYN_ROUTER_MODE","value":"round-robin"}]}}`), false, "its spec"},
		{"the opt-in, removed", patch("opted-in", `{"metadata":{"annotations":{"hints.kvrouter.io/router-component":null}}}`), false, "its metadata"},
		{"its three entries in a DGD that did not opt in", apply("not-opted-in", "frontend", revision, "main"), false, "did not opt in"},
		{"the opt-in annotation, added", patch("not-opted-in", `{"metadata":{"annotations":{"hints.kvrouter.io/router-component":""}}}`), false, "did not opt in"},
	} {
		t.Run("manager writes "+tc.name, func(t *testing.T) { requireVerdict(t, "kvhint-manager-graphs", tc.write(), tc.allowed, tc.says) })
	}
	// The status subresource is not the manager's to write: RBAC refuses
	// it before admission (and the policy would).
	if _, err := graphs(manager).Patch(ctx, "opted-in", types.MergePatchType, []byte(`{"status":{"state":"failed"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("the manager writing a DGD's status: %v; want forbidden", err)
	}
	got, err := graphs(owner).Get(ctx, "not-opted-in", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetGeneration() != 1 {
		t.Errorf("the DGD that did not opt in is at generation %d", got.GetGeneration())
	}
	// The owner is not held by the policy.
	if _, err := graphs(owner).Patch(ctx, "not-opted-in", types.MergePatchType, []byte(workerImage), metav1.PatchOptions{}); err != nil {
		t.Errorf("the owner changing its DGD: %v", err)
	}
}

func dynamicFor(t *testing.T, cfg *rest.Config) *dynamic.DynamicClient {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
