package rollout

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Observed is what the rollout reconciler saw of a router.
type Observed struct {
	// Stable is the hash of the stable config the router's ConfigMap
	// holds; empty when it holds none.
	Stable string
	// Candidate is the hash of the candidate the ConfigMap stages; empty
	// when none is staged.
	Candidate string
	// Pods are the router's pods.
	Pods []corev1.Pod
	// Now is the time of the observation.
	Now time.Time
	// RestartMode is set when the router's pods read their config only
	// at start-up (an opted-in workload): nothing can be staged in them.
	RestartMode bool
}

// Measure takes one measurement of the current step: it fetches the
// outcomes since the step started and judges them.
type Measure func(stage rolloutapi.Stage, since time.Time, pods Pods) Result

// Event is an event to record on the RouterRollout.
type Event struct {
	Warning bool
	Reason  string
	Action  string
	Message string
}

// Decision is what Advance decided: the status to write, the annotations
// it acted on (to remove), the events, and when to look again if nothing
// happens before.
type Decision struct {
	Status   v1alpha1.RouterRolloutStatus
	Consumed []string
	Events   []Event
	After    time.Duration
}

// Advance moves a rollout on from what was observed: it picks up a new
// candidate, acts on the manual controls, fails the step on a refused
// candidate, takes the measurement that is due (calling measure at most
// once), and advances, promotes, rolls back or pauses. Every decision is
// in the status it returns, so a manager that restarts resumes from it:
// a measurement is taken only when the last recorded one is an interval
// old, and never again once recorded.
func Advance(ro *v1alpha1.RouterRollout, obs Observed, measure Measure) (Decision, error) {
	set, err := SettingsOf(ro.Spec.Analysis)
	if err != nil {
		return Decision{}, err
	}
	if len(ro.Spec.Steps) == 0 {
		return Decision{}, fmt.Errorf("spec.steps is empty")
	}
	a := &advance{ro: ro, set: set, obs: obs, now: metav1.NewTime(obs.Now), at: metav1.NewMicroTime(obs.Now)}
	a.d.Status = *ro.Status.DeepCopy()
	a.st = &a.d.Status
	a.st.ObservedGeneration = ro.Generation
	a.run(measure)
	a.conditions()
	return a.d, nil
}

type advance struct {
	ro  *v1alpha1.RouterRollout
	set Settings
	obs Observed
	now metav1.Time
	// at is now as the status records it, to the microsecond.
	at metav1.MicroTime
	d  Decision
	st *v1alpha1.RouterRolloutStatus
	// pods are counted against the current step once it is known.
	pods Pods
	// pausedBy is the reason of the pause (Paused, Inconclusive).
	pausedBy v1alpha1.ConditionReason
	// promotedBy is the reason of a promotion made now.
	promotedBy v1alpha1.ConditionReason
	// steps name the steps when they are not spec.steps (restart mode).
	steps []string
	// note is said after the step in the conditions' message.
	note string
	// resumed is set when a pause of the step ended now.
	resumed bool
}

// stepName and stepCount say the rollout's steps: spec.steps, unless
// steps names others.
func (a *advance) stepName(i int32) string {
	if a.steps != nil {
		return a.steps[i]
	}
	return StepName(a.ro.Spec.Steps[i])
}

func (a *advance) stepCount() int {
	if a.steps != nil {
		return len(a.steps)
	}
	return len(a.ro.Spec.Steps)
}

func (a *advance) inFlight() bool {
	return a.st.CandidateHash != "" && (a.st.Phase == v1alpha1.RolloutProgressing || a.st.Phase == v1alpha1.RolloutPaused)
}

func (a *advance) event(warning bool, reason, action, format string, args ...any) {
	a.d.Events = append(a.d.Events, Event{Warning: warning, Reason: reason, Action: action, Message: fmt.Sprintf(format, args...)})
}

// later brings the rollout back after d at the latest.
func (a *advance) later(d time.Duration) {
	d = max(d, 100*time.Millisecond)
	if a.d.After == 0 || d < a.d.After {
		a.d.After = d
	}
}

func (a *advance) run(measure Measure) {
	st := a.st
	if st.Phase == "" {
		st.Phase = v1alpha1.RolloutIdle
	}
	if c := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionPaused)); c != nil && c.Status == metav1.ConditionTrue {
		a.pausedBy = v1alpha1.ConditionReason(c.Reason)
	}
	// The stable hash follows the ConfigMap, except while a promotion
	// waits for the router reconciler to write it.
	if a.obs.Stable != "" && (st.StableHash == "" || st.Phase != v1alpha1.RolloutPromoted) {
		st.StableHash = a.obs.Stable
	}
	ann := a.ro.Annotations

	// A candidate rolled back can be tried again with the resume
	// annotation: the router reconciler stages it again.
	if st.Phase == v1alpha1.RolloutRolledBack && st.LastRollback != nil && ann[v1alpha1.ResumeAnnotation] == st.LastRollback.Hash {
		a.d.Consumed = append(a.d.Consumed, v1alpha1.ResumeAnnotation)
		st.Phase = v1alpha1.RolloutIdle
		a.event(false, string(v1alpha1.ReasonIdle), "Retry", "candidate %s rolled back earlier is staged again", st.LastRollback.Hash)
	}

	switch c := a.obs.Candidate; {
	case c != "" && c != st.CandidateHash && !a.finished(c):
		if a.inFlight() {
			a.event(false, string(v1alpha1.ReasonStep), "Replace", "candidate %s replaced by %s before it finished", st.CandidateHash, c)
		}
		st.CandidateHash = c
		st.Phase = v1alpha1.RolloutProgressing
		a.pausedBy = ""
		a.startStep(0)
		a.event(false, string(v1alpha1.ReasonStep), "Stage", "candidate %s staged at step 1/%d (%s)", c, len(a.ro.Spec.Steps), StepName(a.ro.Spec.Steps[0]))
	case c == "" && a.inFlight():
		a.event(false, string(v1alpha1.ReasonIdle), "Withdraw", "candidate %s withdrawn: the RouterRoles compile to the stable config again", st.CandidateHash)
		st.Phase = v1alpha1.RolloutIdle
		a.clearCandidate()
	}
	if !a.inFlight() {
		a.pods = CountPods(a.obs.Pods, a.obs.Stable, nil)
		return
	}

	cand := st.CandidateHash
	if int(st.CurrentStep) >= len(a.ro.Spec.Steps) {
		// The steps were shortened under a running candidate.
		st.CurrentStep = int32(len(a.ro.Spec.Steps) - 1)
	}
	step := a.ro.Spec.Steps[st.CurrentStep]
	stage := StageOf(step, cand)
	a.pods = CountPods(a.obs.Pods, a.obs.Stable, &stage)

	switch {
	case ann[v1alpha1.AbortAnnotation] == cand:
		a.d.Consumed = append(a.d.Consumed, v1alpha1.AbortAnnotation)
		a.rollback(Result{Verdict: v1alpha1.VerdictFailed, Reason: string(v1alpha1.ReasonAborted),
			Message: fmt.Sprintf("aborted by annotation %s at step %d/%d", v1alpha1.AbortAnnotation, st.CurrentStep+1, len(a.ro.Spec.Steps))})
		return
	case ann[v1alpha1.PromoteAnnotation] == cand:
		a.d.Consumed = append(a.d.Consumed, v1alpha1.PromoteAnnotation)
		a.promote(v1alpha1.ReasonManualPromote)
		return
	case a.pods.Refused > 0:
		a.rollback(Result{Verdict: v1alpha1.VerdictFailed, Reason: string(v1alpha1.ReasonCandidateRefused), Message: a.pods.Refusal})
		return
	}
	if a.held(cand, fmt.Sprintf("step %d/%d", st.CurrentStep+1, len(a.ro.Spec.Steps))) {
		return
	}
	a.progress(measure, step, stage)
}

// held applies the resume annotation naming cand and spec.paused, and
// reports whether the candidate waits at its step: paused by spec.paused,
// or by an Inconclusive analysis no one resumed. where names the step in
// the pause's event.
func (a *advance) held(cand, where string) bool {
	if a.ro.Annotations[v1alpha1.ResumeAnnotation] == cand {
		a.d.Consumed = append(a.d.Consumed, v1alpha1.ResumeAnnotation)
		if a.pausedBy == v1alpha1.ReasonInconclusive {
			a.resume("resumed by annotation " + v1alpha1.ResumeAnnotation)
		}
	}
	switch {
	case a.ro.Spec.Paused:
		if a.pausedBy != v1alpha1.ReasonPaused {
			a.event(false, string(v1alpha1.ReasonPaused), "Pause", "paused at %s by spec.paused", where)
		}
		a.st.Phase, a.pausedBy = v1alpha1.RolloutPaused, v1alpha1.ReasonPaused
		return true
	case a.pausedBy == v1alpha1.ReasonPaused:
		// spec.paused went back to false; this also resumes a pause of
		// an Inconclusive analysis that spec.paused overrode.
		a.resume("resumed: spec.paused is false")
	case a.pausedBy == v1alpha1.ReasonInconclusive:
		return true
	}
	return false
}

// finished reports whether c is a candidate the rollout is done with and
// the router reconciler has not yet taken out of the ConfigMap.
func (a *advance) finished(c string) bool {
	st := a.st
	return (st.Phase == v1alpha1.RolloutRolledBack && st.LastRollback != nil && st.LastRollback.Hash == c) ||
		(st.Phase == v1alpha1.RolloutPromoted && st.StableHash == c)
}

func (a *advance) resume(why string) {
	a.st.Phase, a.pausedBy, a.resumed = v1alpha1.RolloutProgressing, "", true
	a.event(false, string(v1alpha1.ReasonStep), "Resume", "%s at step %d/%d", why, a.st.CurrentStep+1, a.stepCount())
}

func (a *advance) startStep(i int32) {
	a.st.CurrentStep = i
	at := a.at
	a.st.StepStartedAt = &at
	a.st.Measurements = nil
}

func (a *advance) clearCandidate() {
	a.st.CandidateHash = ""
	a.st.CurrentStep = 0
	a.st.StepStartedAt = nil
	a.st.Measurements = nil
	a.pausedBy = ""
}

// startClock starts the step's clock, or starts it again on a resume. A
// resumed step's clock restarts: its window, its next measurement and its
// pause all count from the resume. The outcomes are asked for from one
// instant on, so a window that left out the pause would have to drop all
// that came before it too; shifting the start by the pause's length would
// keep the pause's own samples and drop earlier ones. What the pause held
// back (an operator's doubt, too few samples) is judged afresh, and the
// step's pause is time the window saw. The measurements taken before the
// pause stay and count, so that pausing cannot wash out a Failed one.
func (a *advance) startClock() {
	if a.st.StepStartedAt == nil || a.resumed {
		at := a.at
		a.st.StepStartedAt = &at
	}
}

// due is when the step's next measurement is due: an interval after the
// last one taken since the window's start since, else after since.
func (a *advance) due(since time.Time) time.Time {
	if n := len(a.st.Measurements); n > 0 && a.st.Measurements[n-1].At.After(since) {
		return a.st.Measurements[n-1].At.Add(a.set.Interval)
	}
	return since.Add(a.set.Interval)
}

// record keeps a measurement's result, the oldest dropped past
// v1alpha1.MaxMeasurements.
func (a *advance) record(r Result) {
	st := a.st
	st.Measurements = append(st.Measurements, r.measurement(a.at))
	if over := len(st.Measurements) - v1alpha1.MaxMeasurements; over > 0 {
		st.Measurements = st.Measurements[over:]
	}
}

// progress takes the step's measurement that is due and moves on when
// the step is done.
func (a *advance) progress(measure Measure, step v1alpha1.RolloutStep, stage rolloutapi.Stage) {
	st := a.st
	a.startClock()
	since := st.StepStartedAt.Time
	if a.pods.OnCandidate < a.pods.Total {
		// Not every pod runs the step's stage yet: their reports bring
		// the rollout back; the wait is only a safety net.
		a.later(a.set.Interval)
		return
	}
	successes, failures := tally(st.Measurements)
	if successes < a.set.Count {
		if left := a.due(since).Sub(a.obs.Now); left > 0 {
			a.later(left)
			return
		}
		r := measure(stage, since, a.pods)
		a.record(r)
		switch r.Verdict {
		case v1alpha1.VerdictFailed:
			failures++
			if failures >= a.set.FailureLimit {
				a.rollback(r)
				return
			}
			a.later(a.set.Interval)
			return
		case v1alpha1.VerdictSuccessful:
			successes++
		default:
			st.Phase, a.pausedBy = v1alpha1.RolloutPaused, v1alpha1.ReasonInconclusive
			a.event(true, string(v1alpha1.ReasonInconclusive), "Analyze", "step %d/%d (%s) paused: %s",
				st.CurrentStep+1, len(a.ro.Spec.Steps), StepName(step), r.Message)
			return
		}
		if successes < a.set.Count {
			a.later(a.set.Interval)
			return
		}
	}
	if step.Pause != nil {
		if left := since.Add(step.Pause.Duration).Sub(a.obs.Now); left > 0 {
			a.later(left)
			return
		}
	}
	next := st.CurrentStep + 1
	if int(next) >= len(a.ro.Spec.Steps) {
		a.promote(v1alpha1.ReasonPromoted)
		return
	}
	a.startStep(next)
	a.event(false, string(v1alpha1.ReasonStep), "Advance", "candidate %s at step %d/%d (%s)", st.CandidateHash, next+1, len(a.ro.Spec.Steps), StepName(a.ro.Spec.Steps[next]))
	a.later(a.set.Interval)
}

func tally(ms []v1alpha1.Measurement) (successes, failures int) {
	for _, m := range ms {
		switch m.Verdict {
		case v1alpha1.VerdictSuccessful:
			successes++
		case v1alpha1.VerdictFailed:
			failures++
		}
	}
	return successes, failures
}

func (a *advance) promote(reason v1alpha1.ConditionReason) {
	st := a.st
	a.event(false, string(reason), "Promote", "candidate %s promoted to stable (was %s)", st.CandidateHash, st.StableHash)
	st.StableHash = st.CandidateHash
	st.Phase = v1alpha1.RolloutPromoted
	a.promotedBy = reason
	a.clearCandidate()
}

func (a *advance) rollback(r Result) {
	st := a.st
	reason := r.Reason
	if reason == "" {
		reason = "Failed"
	}
	st.LastRollback = &v1alpha1.Rollback{
		Hash: st.CandidateHash, At: a.at, Step: st.CurrentStep, Reason: reason,
		Metric: r.Metric, Baseline: r.Baseline, Canary: r.Canary, PValue: r.PValue, Samples: r.Samples,
		Message:   clip(r.Message, 1024),
		ConfigMap: v1alpha1.RevisionConfigMapName(a.ro.Spec.Router, st.CandidateHash),
	}
	st.Phase = v1alpha1.RolloutRolledBack
	a.event(true, reason, "RollBack", "%s", RollbackMessage(st.LastRollback))
	a.clearCandidate()
}

// RollbackMessage says why a candidate was rolled back, with the figures
// that judged it.
func RollbackMessage(rb *v1alpha1.Rollback) string {
	msg := fmt.Sprintf("candidate %s rolled back at step %d: %s", rb.Hash, rb.Step+1, rb.Reason)
	if rb.Metric != "" {
		msg += fmt.Sprintf(" (%s baseline %s, canary %s", rb.Metric, rb.Baseline, rb.Canary)
		if rb.PValue != "" {
			msg += ", p=" + rb.PValue
		}
		if rb.Samples != nil {
			msg += fmt.Sprintf(", samples %d/%d", rb.Samples.Baseline, rb.Samples.Canary)
		}
		msg += ")"
	}
	if rb.Message != "" {
		msg += ": " + rb.Message
	}
	return clip(msg, 1024)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
