package rollout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// newCatalogNamespace creates a namespace whose router llama runs a
// Dynamo build that declares kvhint's types.
func newCatalogNamespace(t *testing.T) string {
	t.Helper()
	ns := newBareNamespace(t)
	// The Frontend of router llama in these tests is a Dynamo build that
	// links kvhint's types, as config/catalogs/builtin.yaml declares
	// them, so that its roles may run kv-retain (a stock build links no
	// KV-hint policy: TestStockFrontend).
	build, err := os.ReadFile(filepath.Join("..", "..", "config", "catalogs", "builtin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Create(t, k8s, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama-build", Labels: map[string]string{v1alpha1.CatalogForLabel: "llama"}},
		Data:       map[string]string{v1alpha1.CatalogKey: string(build)},
	})
	return ns
}

// newBareNamespace creates a namespace that declares no catalog: router
// llama runs a stock Dynamo build.
func newBareNamespace(t *testing.T) string {
	t.Helper()
	return testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-rollout")
}

func ptrTo[T any](v T) *T { return &v }

// setTTL changes the role's hint, retrying on a conflict with the
// manager's status writes, and returns the new generation.
func setTTL(t *testing.T, rr *v1alpha1.RouterRole, hint v1alpha1.HintItem) int64 {
	t.Helper()
	testenv.Eventually(t, timeout, "updating RouterRole "+rr.Name, func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		rr.Spec.Hints = []v1alpha1.HintItem{hint}
		return k8s.Update(ctx, rr)
	})
	return rr.Generation
}

func retain(ttl int) v1alpha1.HintItem {
	return testenv.Hint("kv-retain", map[string]any{"ttl_seconds": ttl})
}

// waitProgrammed waits until the role's Programmed condition has the
// status, reason and a message that contains text, for generation gen
// when gen > 0, and returns it.
func waitProgrammed(t *testing.T, rr *v1alpha1.RouterRole, st metav1.ConditionStatus, reason v1alpha1.ConditionReason, text string, gen int64) metav1.Condition {
	t.Helper()
	want := testenv.Want{Status: st, Reason: string(reason), MessageContains: text, Generation: gen}
	if gen <= 0 {
		want.Generation = testenv.AnyGeneration
	}
	return testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), want)
}

// hashOf returns the hash the role's router pods are counted against.
func hashOf(t *testing.T, rr *v1alpha1.RouterRole) string {
	t.Helper()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rr), rr); err != nil {
		t.Fatal(err)
	}
	if rr.Status.RouterPods == nil || rr.Status.RouterPods.Hash == "" {
		t.Fatalf("RouterRole %s reports no hash", rr.Name)
	}
	return rr.Status.RouterPods.Hash
}

// livePods returns the router's pods that are not being deleted.
func livePods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.RouterLabel: "llama"}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// policyConfigMap is the ConfigMap a pod's or template's policy volume
// (the manager's) references; empty when it has none.
func policyConfigMap(spec *corev1.PodSpec) string {
	for _, v := range spec.Volumes {
		if v.Name == v1alpha1.PolicyVolumeName && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// requirePodsOn checks that the router has exactly n live pods, every one
// Running, Ready and mounting ConfigMap cm.
func requirePodsOn(t *testing.T, ns string, n int, cm string) {
	t.Helper()
	// Polled: a Deployment's status can read n of n a moment before the
	// last pod of a rollout it then starts (the manager undoing a hand
	// edit, say) is there or an old one is marked for deletion.
	testenv.Eventually(t, timeout, fmt.Sprintf("%d live router pods on %s, Running and Ready", n, cm), func(ctx context.Context) error {
		pods := livePods(t, ns)
		if len(pods) != n {
			return fmt.Errorf("%d live router pods, want %d", len(pods), n)
		}
		for _, p := range pods {
			if got := policyConfigMap(&p.Spec); got != cm || p.Status.Phase != corev1.PodRunning || !ready(&p) {
				return fmt.Errorf("pod %s: mounts %q, phase %s, ready %v; want %q, Running, Ready", p.Name, got, p.Status.Phase, ready(&p), cm)
			}
		}
		return nil
	})
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kstatusOf is what Flux and kpt make of an object.
func kstatusOf(t *testing.T, obj client.Object) *status.Result {
	t.Helper()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("RouterRole")
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
