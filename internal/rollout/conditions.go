package rollout

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// conditions sets the status's pods and conditions from its phase.
//
// kstatus (Flux, kpt) reads Reconciling=True as InProgress and
// Stalled=True as Failed, so Reconciling is present while a candidate is
// in flight and Stalled from a rollback until the next candidate; both
// are removed, not set False, otherwise, as kstatus's "abnormal-true"
// conditions are. Ready=True (Idle, or the last candidate promoted) is
// Current.
func (a *advance) conditions() {
	st := a.st
	gen := a.ro.Generation
	set := func(t v1alpha1.ConditionType, ok bool, reason v1alpha1.ConditionReason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: string(t), Status: status, Reason: string(reason), Message: clip(msg, 32768), ObservedGeneration: gen, LastTransitionTime: a.now,
		})
	}
	abnormal := func(t v1alpha1.ConditionType, on bool, reason v1alpha1.ConditionReason, msg string) {
		if !on {
			meta.RemoveStatusCondition(&st.Conditions, string(t))
			return
		}
		set(t, true, reason, msg)
	}
	st.Pods = a.pods.Status(a.inFlight())
	if st.Phase == v1alpha1.RolloutPromoted && a.promotedBy == "" {
		a.promotedBy = v1alpha1.ReasonPromoted
		if c := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionPromoted)); c != nil && c.Status == metav1.ConditionTrue {
			a.promotedBy = v1alpha1.ConditionReason(c.Reason)
		}
	}

	var reason v1alpha1.ConditionReason
	var msg string
	switch st.Phase {
	case v1alpha1.RolloutProgressing, v1alpha1.RolloutPaused:
		reason = v1alpha1.ReasonStep
		msg = fmt.Sprintf("step %d/%d (%s): %d of %d pods on candidate %s", st.CurrentStep+1, a.stepCount(), a.stepName(st.CurrentStep), a.pods.OnCandidate, a.pods.Total, st.CandidateHash)
		if a.note != "" {
			msg += "; " + a.note
		}
		if n := len(st.Measurements); n > 0 {
			s, f := tally(st.Measurements)
			last := st.Measurements[n-1]
			msg += fmt.Sprintf("; %d measurements (%d Successful, %d Failed), last %s", n, s, f, last.Verdict)
			// Its words carry every judged metric's figures: kstatus
			// readers see the conditions, not status.measurements, and
			// a Successful step should say why as a paused one does.
			if last.Message != "" {
				msg += ": " + last.Message
			}
		}
		if st.Phase == v1alpha1.RolloutPaused {
			reason = a.pausedBy
		}
	case v1alpha1.RolloutPromoted:
		reason, msg = a.promotedBy, fmt.Sprintf("stable config %s runs on %d of %d pods", st.StableHash, a.pods.OnStable, a.pods.Total)
	case v1alpha1.RolloutRolledBack:
		reason, msg = v1alpha1.ReasonRolledBack, RollbackMessage(st.LastRollback)
	case v1alpha1.RolloutIdle, "":
		if !a.obs.RestartMode {
			reason, msg = v1alpha1.ReasonIdle, fmt.Sprintf("no candidate staged; stable config %s runs on %d of %d pods", st.StableHash, a.pods.OnStable, a.pods.Total)
			break
		}
		reason, msg = v1alpha1.ReasonRestartModeRouter, "the router's pods read their config only at start-up and run in a DynamoGraphDeployment: "+
			"Dynamo has no partition or pause of a component's pods, so nothing is staged, and each config reaches every pod by Dynamo's own rolling update"
	default:
		reason, msg = v1alpha1.ReasonIdle, fmt.Sprintf("no candidate staged; stable config %s runs on %d of %d pods", st.StableHash, a.pods.OnStable, a.pods.Total)
	}
	inFlight := a.inFlight()
	set(v1alpha1.ConditionProgressing, st.Phase == v1alpha1.RolloutProgressing, reason, msg)
	set(v1alpha1.ConditionPaused, st.Phase == v1alpha1.RolloutPaused, reason, msg)
	set(v1alpha1.ConditionPromoted, st.Phase == v1alpha1.RolloutPromoted, reason, msg)
	rbReason := reason
	if st.Phase == v1alpha1.RolloutRolledBack {
		rbReason = v1alpha1.ConditionReason(st.LastRollback.Reason)
	}
	set(v1alpha1.ConditionRolledBack, st.Phase == v1alpha1.RolloutRolledBack, rbReason, msg)
	switch {
	case inFlight:
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonCandidateInFlight, msg)
	case st.Phase == v1alpha1.RolloutRolledBack:
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonRolledBack, msg)
	default:
		set(v1alpha1.ConditionReady, true, reason, msg)
	}
	abnormal(v1alpha1.ConditionReconciling, inFlight, reason, msg)
	abnormal(v1alpha1.ConditionStalled, st.Phase == v1alpha1.RolloutRolledBack, rbReason, msg)
}
