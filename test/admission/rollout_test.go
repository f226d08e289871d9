package admission

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
)

// routerDeployment is a router Deployment with its router container
// "frontend", a second container "other" that names a policy file of its
// own, and a volume; opted in when optIn.
func routerDeployment(name string, optIn bool) *appsv1.Deployment {
	labels := map[string]string{"app": name, v1alpha1.RouterLabel: "llama"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.RouterLabel: "llama"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{
						{Name: "frontend", Image: "dynamo-frontend:1.0", Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}},
							VolumeMounts: []corev1.VolumeMount{{Name: "models", MountPath: "/models"}}},
						{Name: "other", Image: "other:1.0", Env: []corev1.EnvVar{{Name: "DYN_ROUTER_POLICY_CONFIG", Value: "/etc/other/hints.yaml"}}},
					},
					Volumes: []corev1.Volume{
						{Name: "models", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "models"}}}},
					},
				},
			},
		},
	}
	if optIn {
		d.Annotations = map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"}
	}
	return d
}

// pointVolume is the manager's own write (workload.PolicyEntries):
// server-side apply of its three entries (volume, mount, variable) in
// container, as its rollout field manager.
func pointVolume(c kubernetes.Interface, ns, deployment, container, configMap string) error {
	ac := appsv1ac.Deployment(deployment, ns).WithSpec(appsv1ac.DeploymentSpec().
		WithTemplate(workload.PolicyEntries(configMap, container)))
	_, err := c.AppsV1().Deployments(ns).Apply(context.Background(), ac, metav1.ApplyOptions{FieldManager: v1alpha1.RolloutFieldManager, Force: true})
	return err
}

// applyTemplate is a server-side apply of a pod template part by the
// manager's identity under its field manager, for writes the manager
// does not make.
func applyTemplate(c kubernetes.Interface, ns, deployment string, tmpl *corev1ac.PodTemplateSpecApplyConfiguration) error {
	ac := appsv1ac.Deployment(deployment, ns).WithSpec(appsv1ac.DeploymentSpec().WithTemplate(tmpl))
	_, err := c.AppsV1().Deployments(ns).Apply(context.Background(), ac, metav1.ApplyOptions{FieldManager: v1alpha1.RolloutFieldManager, Force: true})
	return err
}

// mergePatch is a JSON merge patch of a Deployment, as the manager writes
// a hold and its release.
func mergePatch(c kubernetes.Interface, ns, name string, patch []byte) error {
	_, err := c.AppsV1().Deployments(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// holdBody and releaseBody are the manager's own hold and release of a
// Deployment (workload.HoldPatch, workload.ReleasePatch), read as it is
// now.
func holdBody(ns, name string) ([]byte, error) {
	d, err := admin.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return workload.HoldPatch(d, "0123456789abcdef")
}

func releaseBody(ns, name string) ([]byte, error) {
	d, err := admin.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	h, err := workload.HeldOf(d)
	if err == nil && h == nil {
		err = fmt.Errorf("deployment %s not held", name)
	}
	if err != nil {
		return nil, err
	}
	return workload.ReleasePatch(h)
}

// mergeBody is a merge patch of body, or body's error.
func mergeBody(c kubernetes.Interface, ns, name string, body []byte, err error) error {
	if err != nil {
		return err
	}
	return mergePatch(c, ns, name, body)
}

func patchDeployment(c kubernetes.Interface, ns, name, patch string) error {
	return patchDeploymentOpts(c, ns, name, patch, metav1.PatchOptions{})
}

func patchDeploymentOpts(c kubernetes.Interface, ns, name, patch string, opts metav1.PatchOptions) error {
	_, err := c.AppsV1().Deployments(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), opts)
	return err
}

// TestManagerWritesOnlyThePolicyVolume is the attack on restart mode's
// RBAC: the manager's ClusterRole patches every Deployment, so with its
// token alone one could change any Deployment's image, replicas,
// variables or volumes, or opt a Deployment in. With config/admission,
// the manager's identity (a token of ServiceAccount kvhint-manager bound
// to the manager's pod) may write only its three entries of an opted-in
// Deployment: volume kvhint-policy on one of its own config revisions, a
// read-only mount of it at /etc/kvhint/policy, and
// DYN_ROUTER_POLICY_CONFIG naming the file in a container that sets none.
func TestManagerWritesOnlyThePolicyVolume(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	for _, ns := range []string{"kvhint-system", "serving"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"service_account.yaml", "role.yaml", "role_binding.yaml"} {
		suite.Kubectl(t, "apply", "-f", filepath.Join(repo, "config/rbac", f))
	}
	suite.Kubectl(t, "apply", "-k", filepath.Join(repo, "config/admission"))

	managerPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kvhint-manager-0"},
		Spec: corev1.PodSpec{ServiceAccountName: "kvhint-manager", AutomountServiceAccountToken: ptrTo(false),
			Containers: []corev1.Container{{Name: "manager", Image: "kvhint:test"}}},
	}
	managerPod, err := admin.CoreV1().Pods("kvhint-system").Create(ctx, managerPod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manager := tokenFor(t, "kvhint-system", "kvhint-manager", managerPod)

	const ns = "serving"
	// A router whose name has a dot (a label value, not a RouterRole's
	// router): its config revisions are llama.v2-hints-<hash>, and a "."
	// must match only a dot.
	dotted := routerDeployment("dotted", true)
	dotted.Labels[v1alpha1.RouterLabel] = "llama.v2"
	dotted.Spec.Template.Labels[v1alpha1.RouterLabel] = "llama.v2"
	for _, d := range []*appsv1.Deployment{routerDeployment("opted-in", true), routerDeployment("not-opted-in", false), dotted} {
		if _, err := admin.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const revision = "llama-hints-0123456789abcdef"

	// The policy takes effect a moment after it is created: probe with
	// dry runs, which go through admission and change nothing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := patchDeploymentOpts(manager, ns, "not-opted-in", `{"spec":{"replicas":5}}`, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "kvhint-manager-rollout") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy does not refuse the manager scaling a Deployment that did not opt in: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, tc := range []struct {
		name    string
		write   func() error
		allowed bool
		says    string // in the refusal
	}{
		{"its three entries of an opted-in Deployment, on a revision", func() error { return pointVolume(manager, ns, "opted-in", "frontend", revision) }, true, ""},
		{"its three entries again, on the next revision", func() error {
			return pointVolume(manager, ns, "opted-in", "frontend", "llama-hints-fedcba9876543210")
		}, true, ""},
		{"its volume of an opted-in Deployment, on another ConfigMap", func() error { return pointVolume(manager, ns, "opted-in", "frontend", "someone-elses") }, false, "on a config revision llama-hints-<hash>"},
		{"its volume on a ConfigMap of the router llama.v2, literally", func() error {
			return pointVolume(manager, ns, "dotted", "frontend", "llama.v2-hints-0123456789abcdef")
		}, true, ""},
		{"its volume on a ConfigMap that matches llama.v2 only as a pattern", func() error {
			return pointVolume(manager, ns, "dotted", "frontend", "llamaXv2-hints-0123456789abcdef")
		}, false, "on a config revision llama.v2-hints-<hash>"},
		{"its variable over one the container sets", func() error { return pointVolume(manager, ns, "opted-in", "other", revision) }, false, "where the container sets none"},
		{"another volume of an opted-in Deployment", func() error {
			return patchDeployment(manager, ns, "opted-in", `{"spec":{"template":{"spec":{"volumes":[{"name":"models","configMap":{"name":"`+revision+`"}}]}}}}`)
		}, false, "other volumes"},
		{"the image of an opted-in Deployment", func() error {
			return patchDeployment(manager, ns, "opted-in", `{"spec":{"template":{"spec":{"containers":[{"name":"frontend","image":"evil:1"}]}}}}`)
		}, false, "the rest of the pod template must stay"},
		{"the command of an opted-in Deployment", func() error {
			return patchDeployment(manager, ns, "opted-in", `{"spec":{"template":{"spec":{"containers":[{"name":"frontend","command":["sh","-c","evil"]}]}}}}`)
		}, false, "the rest of the pod template must stay"},
		{"another variable of the router container", func() error {
			return applyTemplate(manager, ns, "opted-in", corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("frontend").
				WithEnv(corev1ac.EnvVar().WithName("DYN_ROUTER_MODE").WithValue("round-robin")))))
		}, false, "the rest of the pod template must stay"},
		{"the variable naming another file", func() error {
			return applyTemplate(manager, ns, "opted-in", corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("frontend").
				WithEnv(corev1ac.EnvVar().WithName("DYN_ROUTER_POLICY_CONFIG").WithValue("/etc/passwd")))))
		}, false, "DYN_ROUTER_POLICY_CONFIG=/etc/kvhint/policy/hints.yaml"},
		{"its volume mounted writable elsewhere", func() error {
			return applyTemplate(manager, ns, "opted-in", corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().
				WithVolumes(corev1ac.Volume().WithName(v1alpha1.PolicyVolumeName).WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(revision))).
				WithContainers(corev1ac.Container().WithName("frontend").
					WithVolumeMounts(corev1ac.VolumeMount().WithName(v1alpha1.PolicyVolumeName).WithMountPath("/usr/bin")))))
		}, false, "a read-only mount of volume kvhint-policy at /etc/kvhint/policy"},
		{"the replicas of an opted-in Deployment", func() error { return patchDeployment(manager, ns, "opted-in", `{"spec":{"replicas":9}}`) }, false, "its spec"},
		{"the pod labels of an opted-in Deployment", func() error {
			return patchDeployment(manager, ns, "opted-in", `{"spec":{"template":{"metadata":{"labels":{"extra":"x"}}}}}`)
		}, false, "the rest of its pod template must stay"},
		{"the opt-in of an opted-in Deployment, removed", func() error {
			return patchDeployment(manager, ns, "opted-in", `{"metadata":{"annotations":{"hints.kvrouter.io/router-container":null}}}`)
		}, false, "its metadata"},
		{"its three entries of a Deployment that did not opt in", func() error { return pointVolume(manager, ns, "not-opted-in", "frontend", revision) }, false, "did not opt in"},
		{"the opt-in annotation, added", func() error {
			return patchDeployment(manager, ns, "not-opted-in", `{"metadata":{"annotations":{"hints.kvrouter.io/router-container":"frontend"}}}`)
		}, false, "did not opt in"},
		{"the image of a Deployment that did not opt in", func() error {
			return patchDeployment(manager, ns, "not-opted-in", `{"spec":{"template":{"spec":{"containers":[{"name":"frontend","image":"evil:1"}]}}}}`)
		}, false, "did not opt in"},
		// A staged rollout's hold (workload.Deployments.Hold): how fast
		// the Deployment rolls, never what a pod runs.
		{"a hold of an opted-in Deployment", func() error { b, err := holdBody(ns, "opted-in"); return mergeBody(manager, ns, "opted-in", b, err) }, true, ""},
		{"spec.paused of a held Deployment", func() error { return mergePatch(manager, ns, "opted-in", []byte(`{"spec":{"paused":true}}`)) }, true, ""},
		{"the replicas of a held Deployment", func() error { return patchDeployment(manager, ns, "opted-in", `{"spec":{"replicas":9}}`) }, false, "its spec"},
		{"another annotation beside the hold record", func() error {
			return mergePatch(manager, ns, "opted-in", []byte(`{"metadata":{"annotations":{"hints.kvrouter.io/held":"{}","example.com/other":"x"}}}`))
		}, false, "its metadata"},
		{"a label with the hold record", func() error {
			return mergePatch(manager, ns, "opted-in", []byte(`{"metadata":{"labels":{"extra":"x"},"annotations":{"hints.kvrouter.io/held":"{}"}}}`))
		}, false, "its metadata"},
		{"spec.revisionHistoryLimit with a pause", func() error {
			return mergePatch(manager, ns, "opted-in", []byte(`{"spec":{"paused":false,"revisionHistoryLimit":0}}`))
		}, false, "its spec"},
		{"the release of a held Deployment", func() error { b, err := releaseBody(ns, "opted-in"); return mergeBody(manager, ns, "opted-in", b, err) }, true, ""},
		{"a hold of a Deployment that did not opt in", func() error {
			b, err := holdBody(ns, "not-opted-in")
			return mergeBody(manager, ns, "not-opted-in", b, err)
		}, false, "did not opt in"},
		{"spec.paused of a Deployment that did not opt in", func() error {
			return mergePatch(manager, ns, "not-opted-in", []byte(`{"spec":{"paused":true}}`))
		}, false, "did not opt in"},
	} {
		t.Run("manager writes "+tc.name, func(t *testing.T) { requireVerdict(t, "kvhint-manager-rollout", tc.write(), tc.allowed, tc.says) })
	}

	// Neither RBAC (no create or delete of Deployments) nor the policy lets
	// the manager run a pod template of its own, or scale one.
	_, err = manager.AppsV1().Deployments(ns).Create(ctx, routerDeployment("opted-in-kvhint-candidate", true), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("manager creates a Deployment: %v; want Forbidden", err)
	}
	err = manager.AppsV1().Deployments(ns).Delete(ctx, "opted-in", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("manager deletes a Deployment: %v; want Forbidden", err)
	}
	_, err = manager.AppsV1().Deployments(ns).Patch(ctx, "opted-in", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}, "scale")
	if !apierrors.IsForbidden(err) {
		t.Errorf("manager scales a Deployment: %v; want Forbidden", err)
	}

	d, err := admin.AppsV1().Deployments(ns).Get(ctx, "not-opted-in", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != 1 {
		t.Errorf("the Deployment that did not opt in is at generation %d", d.Generation)
	}
	for _, mf := range d.ManagedFields {
		if strings.HasPrefix(mf.Manager, "kvhint") || mf.Manager == "Go-http-client" {
			t.Errorf("written by %s: %s", mf.Manager, mf.FieldsV1.GetRawString())
		}
	}

	requireManagerStagesUnderPolicy(t, tokenConfig(t, "kvhint-system", "kvhint-manager", managerPod), ns)

	// The admin (the Deployment's owner) is not held by the policy.
	if err := patchDeployment(admin, ns, "not-opted-in", `{"spec":{"replicas":3}}`); err != nil {
		t.Errorf("the owner scaling its Deployment: %v", err)
	}
}

// requireVerdict checks a write's outcome: allowed, or refused by the
// admission policy named policy with a message that says says.
func requireVerdict(t *testing.T, policy string, err error, allowed bool, says string) {
	t.Helper()
	switch {
	case allowed && err != nil:
		t.Errorf("refused: %v", err)
	case !allowed && err == nil:
		t.Errorf("allowed")
	case !allowed && (!strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), says)):
		t.Errorf("refused, but not by %s saying %q: %v", policy, says, err)
	case !allowed:
		t.Logf("refused: %v", err)
	}
}

// requireManagerStagesUnderPolicy runs the manager's own writes of a
// restart-mode rollout step (workload.Deployments: its entries on the
// stable revision, the hold, the pause, then a rollback's release) with
// the manager's identity cfg on a fresh opted-in Deployment: RBAC and the
// admission policy admit every one, and the release leaves the owner's
// strategy and minReadySeconds as they were, the template on the stable
// revision.
func requireManagerStagesUnderPolicy(t *testing.T, cfg *rest.Config, ns string) {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	owner := routerDeployment("staged", true)
	owner.Spec.MinReadySeconds = 3
	owner.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, owner, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const stable, candidate = "llama-hints-0123456789abcdef", "llama-hints-fedcba9876543210"
	wr := &workload.Deployments{Client: c}
	read := func() (*appsv1.Deployment, *rolegraph.Workload) {
		t.Helper()
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, "staged", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d, rolegraph.ReadWorkload(d)
	}
	rev := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	}
	_, w := read()
	if err := wr.Point(ctx, rev(stable), w, &rolegraph.Input{}); err != nil {
		t.Fatalf("the manager's first config: %v", err)
	}
	var d *appsv1.Deployment
	for _, up := range []bool{false, true} {
		d, w = read()
		if err := wr.Hold(ctx, d, w, rev(candidate), up); err != nil {
			t.Fatalf("the manager's hold (candidate pod up %v): %v", up, err)
		}
	}
	d, w = read()
	if !d.Spec.Paused || d.Annotations[v1alpha1.HeldAnnotation] == "" || w.References != candidate || d.Spec.MinReadySeconds != 599 {
		t.Fatalf("held: paused %v, record %q, template on %s, minReadySeconds %d", d.Spec.Paused, d.Annotations[v1alpha1.HeldAnnotation], w.References, d.Spec.MinReadySeconds)
	}
	if err := wr.Release(ctx, d, w, rev(stable)); err != nil {
		t.Fatalf("the manager's rollback: %v", err)
	}
	d, w = read()
	_, held := d.Annotations[v1alpha1.HeldAnnotation]
	if d.Spec.Paused || held || w.References != stable || d.Spec.MinReadySeconds != 3 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("released: paused %v, record %v, template on %s, minReadySeconds %d, strategy %+v", d.Spec.Paused, held, w.References, d.Spec.MinReadySeconds, d.Spec.Strategy)
	}
}
