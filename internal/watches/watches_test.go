package watches

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestProgressEventsWaitUrgentOnesDoNot: an update that only moves a
// Programmed count is not queued at once (it waits ProgressBatch, with
// the others of its window); a sidecar's report, or a Deployment's spec
// or opt-in, is.
func TestProgressEventsWaitUrgentOnesDoNot(t *testing.T) {
	labels := map[string]string{v1alpha1.RouterLabel: "llama"}
	pod := func(ready corev1.ConditionStatus, hash string) client.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels}}
		if hash != "" {
			p.Annotations = map[string]string{v1alpha1.AppliedHashAnnotation: hash}
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		return p
	}
	dep := func(gen int64, ready int32, ann map[string]string) client.Object {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", Labels: labels, Generation: gen, Annotations: ann},
			Status:     appsv1.DeploymentStatus{ReadyReplicas: ready},
		}
	}
	optIn := map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"}
	for _, tc := range []struct {
		name     string
		urgent   func(o, n client.Object) bool
		old, new client.Object
		now      bool
	}{
		{"pod turns Ready", PodReportChanged, pod(corev1.ConditionFalse, ""), pod(corev1.ConditionTrue, ""), false},
		{"sidecar reports a hash", PodReportChanged, pod(corev1.ConditionTrue, ""), pod(corev1.ConditionTrue, "0123"), true},
		{"Deployment rollout status", WorkloadChanged, dep(2, 1, optIn), dep(2, 2, optIn), false},
		{"Deployment template changed (drift)", WorkloadChanged, dep(2, 2, optIn), dep(3, 2, optIn), true},
		{"Deployment opts in", WorkloadChanged, dep(2, 2, nil), dep(2, 2, optIn), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			ProgressEvents(tc.urgent).Update(context.Background(), event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}, q)
			if got := q.Len() == 1; got != tc.now {
				t.Errorf("queued at once: %v, want %v (queue length %d)", got, tc.now, q.Len())
			}
		})
	}
}

// TestGraphChanged: a DGD's component counts moving is progress, batched;
// its spec, metadata, observed generation, state or Ready is news at once.
func TestGraphChanged(t *testing.T) {
	graph := func(gen, observed int64, state, ready string, updated int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"status": map[string]any{
				"observedGeneration": observed, "state": state,
				"conditions": []any{map[string]any{"type": "Ready", "status": ready}},
				"components": map[string]any{"frontend": map[string]any{"updatedReplicas": updated}},
			},
		}}
		u.SetGeneration(gen)
		u.SetLabels(map[string]string{v1alpha1.RouterLabel: "llama"})
		return u
	}
	base := graph(2, 2, "pending", "False", 1)
	for _, tc := range []struct {
		name   string
		n      *unstructured.Unstructured
		urgent bool
	}{
		{"a replica updated", graph(2, 2, "pending", "False", 2), false},
		{"the spec", graph(3, 2, "pending", "False", 1), true},
		{"the generation observed", graph(2, 3, "pending", "False", 1), true},
		{"the state", graph(2, 2, "successful", "False", 1), true},
		{"Ready", graph(2, 2, "pending", "True", 1), true},
	} {
		if got := GraphChanged(base, tc.n); got != tc.urgent {
			t.Errorf("%s: urgent %v, want %v", tc.name, got, tc.urgent)
		}
	}
}
