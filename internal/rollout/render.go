package rollout

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Staging is what a router's ConfigMap holds under its rollout.
type Staging struct {
	// ConfigMap is the router's ConfigMap to write.
	ConfigMap *corev1.ConfigMap
	// Candidate is the immutable ConfigMap that keeps the staged
	// candidate for inspection ("<router>-hints-<hash>"); nil when none
	// is staged.
	Candidate *corev1.ConfigMap
	// RolledBack is set when the config compiled now is the candidate
	// the rollout rolled back: it is not staged, and the RouterRoles
	// whose spec produced it (ChangedRoles) say so.
	RolledBack *v1alpha1.Rollback
	// ChangedRoles are the RouterRoles, by name, whose entries of the
	// compiled config differ from the stable config's: those whose spec
	// produced the candidate, staged or rolled back.
	ChangedRoles map[string]bool
	// Step says where a staged candidate is, for the RouterRoles'
	// status: "step 1/3 (shadow)".
	Step string
}

// Render returns what the router's ConfigMap holds when its RouterRoles
// compile to want (the ConfigMap the compile step would write) under the
// rollout ro (nil: none) while current (nil: none) is the ConfigMap now.
// promoted is the immutable ConfigMap of ro's status.stableHash, when it
// is not current's stable config: the config the rollout promoted, which
// becomes the stable one.
//
// With no rollout, no ConfigMap yet, or a ConfigMap with no policy file
// (no role was ever accepted: nothing to compare against), want is written
// as it is. Otherwise the stable keys stay as the ConfigMap holds them
// (or as promoted holds them) and want's config is the candidate, staged
// as the rollout's status says for it (shadow until the rollout picks it
// up), unless the rollout rolled it back.
func Render(ro *v1alpha1.RouterRollout, current, promoted, want *corev1.ConfigMap) (Staging, error) {
	out := Staging{ConfigMap: want}
	if ro == nil || current == nil {
		return out, nil
	}
	split, _ := compiled.Split(current.Data) // a bad stage is dropped: the stable keys are kept whatever
	stable := stableKeys(split.Stable)
	stableHash := current.Annotations[v1alpha1.HashAnnotation]
	if _, ok := stable[compiled.PolicyKey]; !ok || compiled.Hash(stable) != stableHash {
		return out, nil
	}
	stableSources := current.Annotations[compiled.SourcesAnnotation]
	if h := ro.Status.StableHash; h != "" && h != stableHash && promoted != nil && compiled.Hash(promoted.Data) == h {
		stable, stableHash, stableSources = stableKeys(promoted.Data), h, promoted.Annotations[compiled.SourcesAnnotation]
	}
	hash := want.Annotations[v1alpha1.HashAnnotation]
	if hash == stableHash {
		return out, nil
	}
	cm := want.DeepCopy()
	cm.Annotations[v1alpha1.HashAnnotation] = stableHash
	cm.Annotations[compiled.SourcesAnnotation] = stableSources
	out.ConfigMap = cm
	if rb := ro.Status.LastRollback; ro.Status.Phase == v1alpha1.RolloutRolledBack && rb != nil && rb.Hash == hash {
		cm.Data = stable
		out.RolledBack = rb
		out.ChangedRoles = changedRoles(want.Annotations[compiled.SourcesAnnotation], stableSources)
		return out, nil
	}
	stage := rolloutapi.Stage{Candidate: hash, Stage: rolloutapi.StageShadow}
	out.Step = "waiting for RouterRollout " + ro.Name + " to pick it up"
	if st := ro.Status; st.CandidateHash == hash && (st.Phase == v1alpha1.RolloutProgressing || st.Phase == v1alpha1.RolloutPaused) &&
		int(st.CurrentStep) < len(ro.Spec.Steps) {
		stage = StageOf(ro.Spec.Steps[st.CurrentStep], hash)
		out.Step = fmt.Sprintf("step %d/%d (%s)", st.CurrentStep+1, len(ro.Spec.Steps), StepName(ro.Spec.Steps[st.CurrentStep]))
		if st.Phase == v1alpha1.RolloutPaused {
			out.Step += ", paused"
		}
	}
	out.ChangedRoles = changedRoles(want.Annotations[compiled.SourcesAnnotation], stableSources)
	data, err := compiled.StagedData(stable, want.Data, stage)
	if err != nil {
		return Staging{}, fmt.Errorf("staging candidate %s of router %s: %w", hash, ro.Spec.Router, err)
	}
	cm.Data = data
	cm.Annotations[compiled.CandidateHashAnnotation] = hash
	out.Candidate = candidateConfigMap(ro, want, hash)
	return out, nil
}

// stableKeys returns the keys of a compiled config (compiled.Hash's).
func stableKeys(data map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{compiled.PolicyKey, compiled.RolesKey, compiled.FormKey} {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

// candidateConfigMap is the immutable ConfigMap that keeps a candidate's
// compiled config, owned by the rollout, which garbage collects it.
func candidateConfigMap(ro *v1alpha1.RouterRollout, want *corev1.ConfigMap, hash string) *corev1.ConfigMap {
	immutable := true
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1alpha1.RevisionConfigMapName(ro.Spec.Router, hash),
			Namespace: ro.Namespace,
			Labels: map[string]string{
				v1alpha1.RouterLabel:     ro.Spec.Router,
				v1alpha1.ManagedByLabel:  v1alpha1.ManagedBy,
				v1alpha1.ConfigHashLabel: hash,
			},
			Annotations: maps.Clone(want.Annotations),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "RouterRollout", Name: ro.Name, UID: ro.UID,
			}},
		},
		Data:      stableKeys(want.Data),
		Immutable: &immutable,
	}
}

// changedRoles returns the RouterRoles whose entries in the config of
// sources differ from those of the stable config's.
func changedRoles(sources, stableSources string) map[string]bool {
	now, err := compiled.Sources(map[string]string{compiled.SourcesAnnotation: sources})
	if err != nil {
		return nil
	}
	was, _ := compiled.Sources(map[string]string{compiled.SourcesAnnotation: stableSources})
	out := map[string]bool{}
	for role, src := range now {
		if was[role] != src {
			out[src.RouterRole] = true
		}
	}
	return out
}

// MarkRolledBack sets a RouterRole's status to say that the rollout
// rolled back the config its current spec compiled into: Programmed and
// Ready False with reason RolledBack, Stalled True (waiting cannot fix
// it: a change of the spec can), Reconciling gone.
//
// prev are the conditions the role has now: a condition whose status does
// not change keeps its lastTransitionTime, so that the same status
// computed again is not a write.
func MarkRolledBack(st *v1alpha1.RouterRoleStatus, prev []metav1.Condition, gen int64, rb *v1alpha1.Rollback, now metav1.Time) {
	mark(st, prev, gen, v1alpha1.ReasonRolledBack, RollbackMessage(rb)+"; the router pods run the stable config", v1alpha1.ConditionStalled, v1alpha1.ConditionReconciling, now)
}

// MarkStaged sets a RouterRole's status to say that the config its
// current spec compiled into is the rollout's candidate, at step:
// Programmed and Ready False with reason Staged, Reconciling True (kstatus:
// InProgress), Stalled gone.
func MarkStaged(st *v1alpha1.RouterRoleStatus, prev []metav1.Condition, gen int64, ro, candidate, step string, now metav1.Time) {
	msg := fmt.Sprintf("config %s is staged by RouterRollout %s, %s; the router pods run the stable config until it is promoted", candidate, ro, step)
	mark(st, prev, gen, v1alpha1.ReasonStaged, msg, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled, now)
}

// MarkHeld sets the status of a RouterRole whose spec produced config
// hash, held out of a restart-mode router's Deployment for RouterRollout
// ro: rolled back, when ro rolled it back; left to the role's own count
// of pods during "the rest", which says how far the Deployment's rolling
// update went; else staged, at ro's step or waiting for ro to pick it up.
func MarkHeld(st *v1alpha1.RouterRoleStatus, prev []metav1.Condition, gen int64, ro *v1alpha1.RouterRollout, hash string, now metav1.Time) {
	rs := ro.Status
	inFlight := rs.CandidateHash == hash && (rs.Phase == v1alpha1.RolloutProgressing || rs.Phase == v1alpha1.RolloutPaused)
	switch rb := rs.LastRollback; {
	case rs.Phase == v1alpha1.RolloutRolledBack && rb != nil && rb.Hash == hash:
		MarkRolledBack(st, prev, gen, rb, now)
	case inFlight && rs.CurrentStep > 0:
	case inFlight:
		MarkStaged(st, prev, gen, ro.Name, hash, "step 1/2 ("+RestartStepOnePod+")", now)
	default:
		MarkStaged(st, prev, gen, ro.Name, hash, "waiting for RouterRollout "+ro.Name+" to pick it up", now)
	}
}

// mark sets Programmed and Ready False and the abnormal condition on True
// with reason and msg, and removes off.
func mark(st *v1alpha1.RouterRoleStatus, prev []metav1.Condition, gen int64, reason v1alpha1.ConditionReason, msg string, on, off v1alpha1.ConditionType, now metav1.Time) {
	prog := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionProgrammed))
	progGen := gen
	if prog != nil {
		progGen = prog.ObservedGeneration
	}
	for _, c := range []metav1.Condition{
		{Type: string(v1alpha1.ConditionProgrammed), ObservedGeneration: progGen, Status: metav1.ConditionFalse},
		{Type: string(v1alpha1.ConditionReady), ObservedGeneration: gen, Status: metav1.ConditionFalse},
		{Type: string(on), ObservedGeneration: gen, Status: metav1.ConditionTrue},
	} {
		c.Reason, c.Message, c.LastTransitionTime = string(reason), clip(msg, 32768), now
		if p := meta.FindStatusCondition(prev, c.Type); p != nil && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		}
		meta.RemoveStatusCondition(&st.Conditions, c.Type)
		meta.SetStatusCondition(&st.Conditions, c)
	}
	meta.RemoveStatusCondition(&st.Conditions, string(off))
}
