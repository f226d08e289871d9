package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

func newNamespace(t *testing.T) string {
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
	create(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama-build", Labels: map[string]string{v1alpha1.CatalogForLabel: "llama"}},
		Data:       map[string]string{v1alpha1.CatalogKey: string(build)},
	})
	return ns
}

// newBareNamespace creates a namespace that declares no catalog: router
// llama runs a stock Dynamo build.
func newBareNamespace(t *testing.T) string {
	t.Helper()
	requireEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kvhint-rollout-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not true within %s: %v", what, timeout, last)
	}
}

func ptrTo[T any](v T) *T { return &v }

// routerDeployment is a Dynamo router Deployment as its owner writes it:
// labelled for router llama, opted in with its router container
// "frontend", started with --router-mode kv, and with no policy file of
// its own (the manager adds it). Its pods run on kwok's fake node.
func routerDeployment(ns string, replicas int32, args ...string) *appsv1.Deployment {
	if args == nil {
		args = []string{"--router-mode", "kv"}
	}
	labels := map[string]string{"app": "llama-frontend", v1alpha1.RouterLabel: "llama"}
	surge := intstr.FromString("25%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "llama-frontend",
			Labels:      map[string]string{v1alpha1.RouterLabel: "llama"},
			Annotations: map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llama-frontend"}},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeName:                     node,
					AutomountServiceAccountToken: ptrTo(false),
					Containers: []corev1.Container{{
						Name: "frontend", Image: "dynamo-frontend:test",
						Command: []string{"python", "-m", "dynamo.frontend"},
						Args:    args,
					}},
				},
			},
		},
	}
}

// decodeRole is a decode RouterRole of router llama with one kv-retain
// hint whose ttl_seconds is ttl: each ttl is another compiled config.
func decodeRole(ns string, ttl int) *v1alpha1.RouterRole {
	return &v1alpha1.RouterRole{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decode"},
		Spec: v1alpha1.RouterRoleSpec{
			Router: "llama", Role: v1alpha1.RoleDecode,
			WorkerSelection: v1alpha1.WorkerSelection{Type: "dynamo-default-cost-fn"},
			Hints:           []v1alpha1.HintItem{{Type: "kv-retain", Parameters: params(map[string]any{"ttl_seconds": ttl})}},
		},
	}
}

func params(p map[string]any) *apiextensionsv1.JSON {
	js, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return &apiextensionsv1.JSON{Raw: js}
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

// setTTL changes the role's hint, retrying on a conflict with the
// manager's status writes, and returns the new generation.
func setTTL(t *testing.T, rr *v1alpha1.RouterRole, hint v1alpha1.HintItem) int64 {
	t.Helper()
	eventually(t, "updating RouterRole "+rr.Name, func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		rr.Spec.Hints = []v1alpha1.HintItem{hint}
		return k8s.Update(ctx, rr)
	})
	return rr.Generation
}

func retain(ttl int) v1alpha1.HintItem {
	return v1alpha1.HintItem{Type: "kv-retain", Parameters: params(map[string]any{"ttl_seconds": ttl})}
}

// waitProgrammed waits until the role's Programmed condition has the
// status, reason and a message that contains text, for generation gen
// when gen > 0, and returns it.
func waitProgrammed(t *testing.T, rr *v1alpha1.RouterRole, st metav1.ConditionStatus, reason v1alpha1.ConditionReason, text string, gen int64) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, fmt.Sprintf("RouterRole %s Programmed=%s %s %q", rr.Name, st, reason, text), func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionProgrammed))
		switch {
		case c == nil:
			return fmt.Errorf("no Programmed yet")
		case c.Status != st || c.Reason != string(reason) || !strings.Contains(c.Message, text) || (gen > 0 && c.ObservedGeneration != gen):
			return fmt.Errorf("Programmed=%s %s (generation %d): %s", c.Status, c.Reason, c.ObservedGeneration, c.Message)
		}
		got = *c
		return nil
	})
	return got
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
	eventually(t, fmt.Sprintf("%d live router pods on %s, Running and Ready", n, cm), func(ctx context.Context) error {
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

// kubectl runs the kubectl of KUBEBUILDER_ASSETS as the admin.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
