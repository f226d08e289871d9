package managercache

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
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

// TestTrimKeepsWhatRestartModeCounts: a restart-mode router's count reads
// a cached pod's Ready condition and its configMap volumes, and config
// revision collection a cached ReplicaSet's; trimming keeps those, once or
// twice, and nothing else of the spec.
func TestTrimKeepsWhatRestartModeCounts(t *testing.T) {
	vols := []corev1.Volume{
		{Name: "policy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "llama-hints-0123456789abcdef"}, Items: []corev1.KeyToPath{{Key: "hints.yaml", Path: "hints.yaml"}}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	want := []corev1.Volume{{Name: "policy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "llama-hints-0123456789abcdef"}}}}}
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{Volumes: vols, Containers: []corev1.Container{{Name: "router", Image: "big"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, Message: "long"},
		}},
	}
	once, _ := trimPod(pod)
	twice, _ := trimPod(once)
	p := twice.(*corev1.Pod)
	if diff := cmp.Diff(want, p.Spec.Volumes); diff != "" || len(p.Spec.Containers) != 0 {
		t.Errorf("pod volumes (-want +got):\n%s\ncontainers: %d", diff, len(p.Spec.Containers))
	}
	if diff := cmp.Diff([]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}, p.Status.Conditions); diff != "" {
		t.Errorf("pod conditions (-want +got):\n%s", diff)
	}
	rs := &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: pod.Spec}}}
	trimmed, _ := trimReplicaSet(rs)
	got := trimmed.(*appsv1.ReplicaSet).Spec.Template.Spec
	if diff := cmp.Diff(want, got.Volumes); diff != "" || len(got.Containers) != 0 {
		t.Errorf("ReplicaSet volumes (-want +got):\n%s\ncontainers: %d", diff, len(got.Containers))
	}
}
