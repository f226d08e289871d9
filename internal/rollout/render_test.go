package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// compiledCM is a compiled ConfigMap holding policy, with one role's
// source at generation gen.
func compiledCM(policy string, gen int64) *corev1.ConfigMap {
	data := map[string]string{compiled.PolicyKey: policy, compiled.RolesKey: "decode:\n  routerMode: kv\n"}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "router-hints", Namespace: "ns", Annotations: map[string]string{
			v1alpha1.HashAnnotation:    compiled.Hash(data),
			compiled.SourcesAnnotation: compiled.EncodeSources(map[string]compiled.Source{"decode": {RouterRole: "decode", UID: "u1", Generation: gen}}),
		}},
		Data: data,
	}
}

func TestRender(t *testing.T) {
	stable := compiledCM("worker_selection:\n  decode: kvcr\n", 1)
	want := compiledCM("worker_selection:\n  decode: dynamo-default-cost-fn\n", 2)
	S, H := stable.Annotations[v1alpha1.HashAnnotation], want.Annotations[v1alpha1.HashAnnotation]
	ro := testRollout()
	ro.UID = "ro-uid"

	if st, _ := Render(nil, stable, nil, want); st.ConfigMap != want {
		t.Error("no rollout: want is not written as it is")
	}
	if st, _ := Render(ro, nil, nil, want); st.ConfigMap != want {
		t.Error("first config: want is not written as it is")
	}

	// A new candidate is staged in shadow beside the stable config.
	st, err := Render(ro, stable, nil, want)
	if err != nil {
		t.Fatal(err)
	}
	split, err := compiled.Split(st.ConfigMap.Data)
	if err != nil {
		t.Fatal(err)
	}
	if st.ConfigMap.Annotations[v1alpha1.HashAnnotation] != S || compiled.Hash(split.Stable) != S ||
		*split.Stage != (rolloutapi.Stage{Candidate: H, Stage: rolloutapi.StageShadow}) || st.ConfigMap.Annotations[compiled.CandidateHashAnnotation] != H {
		t.Fatalf("staged: %v %+v", st.ConfigMap.Annotations, split.Stage)
	}
	if st.ConfigMap.Annotations[compiled.SourcesAnnotation] != stable.Annotations[compiled.SourcesAnnotation] {
		t.Error("the stable config's sources are not kept")
	}
	if c := st.Candidate; c == nil || c.Name != "router-hints-"+H || !*c.Immutable || c.OwnerReferences[0].UID != "ro-uid" || compiled.Hash(c.Data) != H {
		t.Fatalf("candidate ConfigMap: %+v", c)
	}

	// The rollout's step sets the stage.
	ro.Status = v1alpha1.RouterRolloutStatus{Phase: v1alpha1.RolloutProgressing, StableHash: S, CandidateHash: H, CurrentStep: 1}
	st, _ = Render(ro, st.ConfigMap, nil, want)
	split, _ = compiled.Split(st.ConfigMap.Data)
	if *split.Stage != (rolloutapi.Stage{Candidate: H, Stage: rolloutapi.StageCanary, Weight: 10}) {
		t.Fatalf("canary stage: %+v", split.Stage)
	}
	staged := st.ConfigMap

	// Rolled back: the stable config only, and the role that changed.
	ro.Status = v1alpha1.RouterRolloutStatus{Phase: v1alpha1.RolloutRolledBack, StableHash: S, LastRollback: &v1alpha1.Rollback{Hash: H, Reason: "PrefixHitDrop"}}
	st, _ = Render(ro, staged, nil, want)
	if len(st.ConfigMap.Data) != 2 || compiled.Hash(st.ConfigMap.Data) != S || st.RolledBack == nil || !st.ChangedRoles["decode"] || st.Candidate != nil {
		t.Fatalf("rolled back: %v %+v %v", st.ConfigMap.Data, st.RolledBack, st.ChangedRoles)
	}

	// Promoted: the promoted config becomes the stable one, from its
	// candidate ConfigMap, even when the roles compile to another now.
	ro.Status = v1alpha1.RouterRolloutStatus{Phase: v1alpha1.RolloutPromoted, StableHash: H}
	promoted := candidateConfigMap(ro, want, H)
	st, _ = Render(ro, staged, promoted, want)
	if st.ConfigMap.Annotations[v1alpha1.HashAnnotation] != H || len(st.ConfigMap.Data) != 2 || compiled.Hash(st.ConfigMap.Data) != H {
		t.Fatalf("promoted: %v", st.ConfigMap.Annotations)
	}
	third := compiledCM("worker_selection:\n  decode: dynamo-random\n", 3)
	st, _ = Render(ro, staged, promoted, third)
	split, _ = compiled.Split(st.ConfigMap.Data)
	if compiled.Hash(split.Stable) != H || split.Stage.Candidate != third.Annotations[v1alpha1.HashAnnotation] {
		t.Fatalf("promoted, then a new candidate: stable %s, stage %+v", compiled.Hash(split.Stable), split.Stage)
	}
}
