package workload

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// mergeInto applies a JSON merge patch to d as the API server does.
func mergeInto(t *testing.T, d *appsv1.Deployment, patch []byte) *appsv1.Deployment {
	t.Helper()
	doc, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	doc, err = jsonpatch.MergePatch(doc, patch)
	if err != nil {
		t.Fatal(err)
	}
	out := &appsv1.Deployment{}
	if err := json.Unmarshal(doc, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHoldThenRelease: the hold sets one surge pod, maxUnavailable 0 and
// minReadySeconds one second under the progress deadline, and records the
// stable hash and what it replaced; the release puts back exactly the
// owner's strategy and minReadySeconds (a Recreate strategy without its
// rollingUpdate, unset fields unset), removes the record and unpauses,
// other annotations kept.
func TestHoldThenRelease(t *testing.T) {
	surge2 := intstr.FromInt32(2)
	zero := intstr.FromInt32(0)
	for _, tc := range []struct {
		name     string
		strategy appsv1.DeploymentStrategy
		minReady int32
		deadline *int32
		want     int32 // minReadySeconds while held
	}{
		{"rolling, surge 2, deadline unset", appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge2, MaxUnavailable: &zero}}, 0, nil, 599},
		{"recreate, minReadySeconds 7, deadline 30", appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}, 7, ptr(int32(30)), 29},
		{"unset strategy", appsv1.DeploymentStrategy{}, 0, ptr(int32(5)), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "router", Annotations: map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"}},
				Spec:       appsv1.DeploymentSpec{Strategy: tc.strategy, MinReadySeconds: tc.minReady, ProgressDeadlineSeconds: tc.deadline, Template: corev1.PodTemplateSpec{}},
			}
			body, err := HoldPatch(orig, "0123456789abcdef")
			if err != nil {
				t.Fatal(err)
			}
			held := mergeInto(t, orig, body)
			ru := held.Spec.Strategy.RollingUpdate
			if held.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "0" {
				t.Errorf("held strategy %+v; want RollingUpdate maxSurge 1 maxUnavailable 0", held.Spec.Strategy)
			}
			if held.Spec.MinReadySeconds != tc.want {
				t.Errorf("held minReadySeconds %d; want %d", held.Spec.MinReadySeconds, tc.want)
			}
			if diff := cmp.Diff(orig.Spec.Template, held.Spec.Template); diff != "" {
				t.Errorf("the hold changed the template (-was +now):\n%s", diff)
			}
			h, err := HeldOf(held)
			if err != nil || h == nil || h.Stable != "0123456789abcdef" {
				t.Fatalf("hold record %+v, %v", h, err)
			}
			if s, _ := StableHash(held, "llama"); s != "0123456789abcdef" {
				t.Errorf("StableHash of a held Deployment %q; want the record's", s)
			}

			held.Spec.Paused = true
			body, err = ReleasePatch(h)
			if err != nil {
				t.Fatal(err)
			}
			back := mergeInto(t, held, body)
			if diff := cmp.Diff(orig, back); diff != "" {
				t.Errorf("released Deployment differs from the owner's (-owner +released):\n%s", diff)
			}
		})
	}
}

// TestHeldOfBadRecord: a hold record that is not one is an error naming
// the Deployment and the annotation, never a guess.
func TestHeldOfBadRecord(t *testing.T) {
	for _, v := range []string{"not json", `{"strategy":null}`} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "router", Annotations: map[string]string{v1alpha1.HeldAnnotation: v}}}
		if h, err := HeldOf(d); err == nil || h != nil {
			t.Errorf("%q: %+v, %v; want an error", v, h, err)
		} else if want := "deployment router: annotation " + v1alpha1.HeldAnnotation; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("%q: error %q; want it to start %q", v, err, want)
		}
	}
}

// TestProblem: a ReplicaFailure says why before a Progressing deadline
// does; a paused Deployment's Unknown Progressing is no problem.
func TestProblem(t *testing.T) {
	d := &appsv1.Deployment{Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Message: "timed out"},
		{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Message: "exceeded quota"},
	}}}
	if got := Problem(d); got != "exceeded quota" {
		t.Errorf("Problem %q; want the quota", got)
	}
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionUnknown, Message: "Deployment is paused"}}
	if got := Problem(d); got != "" {
		t.Errorf("Problem of a paused Deployment %q; want none", got)
	}
}

func ptr[T any](v T) *T { return &v }
