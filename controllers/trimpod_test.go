package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestTrimPodIdempotent: client-go may transform an object it already
// transformed (a resync, a relist), so trimPod must give the same pod when
// run on its own output. Before, the second run found no managedFields and
// dropped the sidecar's own report.
func TestTrimPodIdempotent(t *testing.T) {
	owned := func(manager string) []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{
			{Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:hints.kvrouter.io/router":{}}}}`)},
			{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:hints.kvrouter.io/applied-hash":{}}}}`)},
		}
	}
	for _, tc := range []struct {
		manager  string
		wantHash bool
	}{{v1alpha1.SidecarFieldManager, true}, {"kubectl-annotate", false}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-0", ManagedFields: owned(tc.manager),
			Annotations: map[string]string{v1alpha1.AppliedHashAnnotation: "0123456789abcdef", "other": "x"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "router", Image: "big"}}}}
		once, _ := trimPod(pod)
		twice, _ := trimPod(once)
		for i, got := range []any{once, twice} {
			p := got.(*corev1.Pod)
			_, has := p.Annotations[v1alpha1.AppliedHashAnnotation]
			if has != tc.wantHash || p.Annotations["other"] != "x" || len(p.Spec.Containers) != 0 {
				t.Errorf("%s, run %d: applied-hash kept %v (want %v), annotations %v, %d containers",
					tc.manager, i+1, has, tc.wantHash, p.Annotations, len(p.Spec.Containers))
			}
		}
		if n := len(once.(*corev1.Pod).ManagedFields); n > 1 {
			t.Errorf("%s: %d managedFields entries kept; want only the sidecar's", tc.manager, n)
		}
	}
}
