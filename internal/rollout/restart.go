package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Restart mode: a router Deployment whose Dynamo Frontend reads its policy
// file only at start-up cannot stage a candidate inside a pod, so its
// steps are pods. Whatever spec.steps says, a restart-mode rollout has two
// steps: "one pod" (the router's Deployment held at one surge pod: its
// template points at the candidate's revision, its rolling update adds
// one pod and takes no stable pod down, and it is paused once that pod
// exists) for the pause of spec.steps[0], and "the rest" (the owner's
// strategy back and the Deployment unpaused: its own rolling update
// replaces every other pod). What judges the
// first step is what restart mode can observe: the candidate pod becomes
// Ready and stays Ready, never restarting, for the pause; plus the
// Prometheus provider's analysis when one is configured. The sidecar
// provider has nothing to ask: a Dynamo Frontend has no sidecar.

// Restart-mode step names.
const (
	RestartStepOnePod = "one pod"
	RestartStepRest   = "the rest"
)

// RestartAction is what the reconciler must do to the router's
// Deployment after AdvanceRestart (see workload.Deployments Hold and
// Release). Each is idempotent: a Deployment already so is not written.
type RestartAction string

const (
	// RestartKeep: nothing to change.
	RestartKeep RestartAction = ""
	// RestartHold: hold the router's Deployment at one surge pod, its
	// template on the candidate's revision, paused once the candidate's
	// pod runs.
	RestartHold RestartAction = "Hold"
	// RestartPromote: end the hold with the template on the candidate:
	// the owner's strategy rolls the rest.
	RestartPromote RestartAction = "Promote"
	// RestartRollBack: end the hold with the template back on the stable
	// revision: the one candidate pod goes, no stable pod restarts.
	RestartRollBack RestartAction = "RollBack"
	// RestartRelease: end a hold no rollout step needs any more (the
	// candidate withdrawn), the template on the compiled config.
	RestartRelease RestartAction = "Release"
)

// RestartObserved is what the rollout reconciler saw of a restart-mode
// router Deployment.
type RestartObserved struct {
	Now time.Time
	// Stable is the hash of the revision the router Deployment runs as
	// stable: the one its hold recorded while it is held (its template
	// mounts the candidate then), else the one its template mounts;
	// Compiled is the hash the router reconciler last
	// compiled (the router ConfigMap's). A compiled hash the Deployment
	// does not run is a candidate.
	Stable, Compiled string
	// Pods are the router's pods, the candidate's one included.
	Pods []corev1.Pod
	// RevisionOf returns the config hash a pod's router reads, or "".
	RevisionOf func(*corev1.Pod) string
	// ReadyWithin is how long the candidate pod may take to become Ready:
	// the router Deployment's progress deadline.
	ReadyWithin time.Duration
	// CandidateProblem is why the router Deployment adds no pod, when its
	// status says (a ReplicaFailure condition), else "".
	CandidateProblem string
	// RouterRolled is set when the router Deployment's own rollout of its
	// current template is complete: every replica updated and available,
	// no old pod left.
	RouterRolled bool
	// OwnerPaused is set when the router Deployment is paused and not by
	// a hold: its owner paused it.
	OwnerPaused bool
}

// AdvanceRestart moves a restart-mode rollout on, as Advance does for a
// sidecar router, and says what to do to the Deployments. The status is
// the rollout's whole state: a restarted manager reads the step and its
// start from it, and the rest from the router Deployment (its hold
// record, what its template mounts) and its pods.
func AdvanceRestart(ro *v1alpha1.RouterRollout, obs RestartObserved, measure Measure) (Decision, RestartAction, error) {
	set, err := SettingsOf(ro.Spec.Analysis)
	if err != nil {
		return Decision{}, RestartKeep, err
	}
	if len(ro.Spec.Steps) == 0 {
		return Decision{}, RestartKeep, fmt.Errorf("spec.steps is empty")
	}
	cand := ""
	if obs.Compiled != "" && obs.Compiled != obs.Stable {
		cand = obs.Compiled
	}
	a := &advance{
		ro: ro, set: set, now: metav1.NewTime(obs.Now), at: metav1.NewMicroTime(obs.Now),
		obs:   Observed{Stable: obs.Stable, Candidate: cand, Now: obs.Now},
		steps: []string{RestartStepOnePod, RestartStepRest},
	}
	a.d.Status = *ro.Status.DeepCopy()
	a.st = &a.d.Status
	a.st.ObservedGeneration = ro.Generation
	r := &restart{advance: a, obs: obs}
	act := r.run(measure)
	a.conditions()
	return a.d, act, nil
}

type restart struct {
	*advance
	obs RestartObserved
}

func (r *restart) count(cand string) {
	p := Pods{Reports: map[string]*rolloutapi.ConfigStatus{}}
	for i := range r.obs.Pods {
		pod := &r.obs.Pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		p.Live = append(p.Live, *pod)
	}
	slices.SortFunc(p.Live, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range p.Live {
		p.Total++
		switch h := r.obs.RevisionOf(&p.Live[i]); {
		case h == "":
		case h == cand:
			p.OnCandidate++
		case h == r.st.StableHash:
			p.OnStable++
		}
	}
	r.pods = p
}

func (r *restart) run(measure Measure) RestartAction {
	st := r.st
	if st.Phase == "" {
		st.Phase = v1alpha1.RolloutIdle
	}
	if c := findTrue(st.Conditions, v1alpha1.ConditionPaused); c != "" {
		r.pausedBy = v1alpha1.ConditionReason(c)
	}
	ann := r.ro.Annotations
	inRest := r.inFlight() && st.CurrentStep == 1
	if !inRest && r.obs.Stable != "" {
		st.StableHash = r.obs.Stable
	}
	if st.Phase == v1alpha1.RolloutRolledBack && st.LastRollback != nil && ann[v1alpha1.ResumeAnnotation] == st.LastRollback.Hash {
		r.d.Consumed = append(r.d.Consumed, v1alpha1.ResumeAnnotation)
		st.Phase = v1alpha1.RolloutIdle
		r.event(false, string(v1alpha1.ReasonIdle), "Retry", "candidate %s rolled back earlier is tried again", st.LastRollback.Hash)
	}

	cand := r.advance.obs.Candidate
	switch {
	case inRest && cand == "" && r.obs.Stable == st.CandidateHash:
		// The router's Deployment runs the candidate: its rolling
		// update replaces the rest.
		r.count(st.CandidateHash)
		if r.obs.RouterRolled {
			r.promote(r.promotedReason())
			r.count("")
		} else {
			r.later(r.set.Interval)
		}
		return RestartPromote
	case inRest && cand == st.CandidateHash:
		// Promoted, but the release that rolls the rest is not written
		// yet (the manager stopped between the status and the write).
		r.count(cand)
		r.later(r.set.Interval)
		return RestartPromote
	case cand != "" && cand != st.CandidateHash && !r.finished(cand):
		if r.inFlight() {
			r.event(false, string(v1alpha1.ReasonStep), "Replace", "candidate %s replaced by %s before it finished", st.CandidateHash, cand)
		}
		st.CandidateHash = cand
		st.Phase = v1alpha1.RolloutProgressing
		r.pausedBy = ""
		r.startStep(0)
		r.event(false, string(v1alpha1.ReasonStep), "Stage", "candidate %s runs on one pod first (step 1/2)", cand)
	case cand == "" && r.inFlight():
		r.event(false, string(v1alpha1.ReasonIdle), "Withdraw", "candidate %s withdrawn: the RouterRoles compile to the stable config again", st.CandidateHash)
		st.Phase = v1alpha1.RolloutIdle
		r.clearCandidate()
	}
	if !r.inFlight() {
		r.count("")
		if st.Phase == v1alpha1.RolloutRolledBack {
			return RestartRollBack
		}
		return RestartRelease
	}
	cand = st.CandidateHash
	r.count(cand)
	switch {
	case ann[v1alpha1.AbortAnnotation] == cand:
		r.d.Consumed = append(r.d.Consumed, v1alpha1.AbortAnnotation)
		r.rollback(Result{Verdict: v1alpha1.VerdictFailed, Reason: string(v1alpha1.ReasonAborted),
			Message: fmt.Sprintf("aborted by annotation %s at step 1/2 (%s)", v1alpha1.AbortAnnotation, RestartStepOnePod)})
		return RestartRollBack
	case ann[v1alpha1.PromoteAnnotation] == cand:
		r.d.Consumed = append(r.d.Consumed, v1alpha1.PromoteAnnotation)
		r.promotedBy = v1alpha1.ReasonManualPromote
		return r.toRest()
	}
	if r.obs.OwnerPaused {
		// Holding the Deployment would unpause it, against its owner's
		// word. The step waits, its clock (and the candidate pod's
		// deadline) starting when the owner unpauses it.
		at := r.at
		st.StepStartedAt = &at
		r.note = "waiting: the router's Deployment is paused by its owner (spec.paused); the candidate runs on one pod once it is unpaused"
		r.later(r.set.Interval)
		return RestartKeep
	}
	if msg := r.refusal(cand); msg != "" {
		r.rollback(Result{Verdict: v1alpha1.VerdictFailed, Reason: string(v1alpha1.ReasonCandidateRefused), Message: msg})
		return RestartRollBack
	}
	if r.held(cand, "step 1/2 ("+RestartStepOnePod+")") {
		return RestartHold
	}
	return r.onePod(measure, cand)
}

// promotedReason is the reason of a promotion that ends "the rest": the
// manual promote recorded when it skipped the first step, if it did.
func (r *restart) promotedReason() v1alpha1.ConditionReason {
	if len(r.st.Measurements) > 0 && r.st.Measurements[0].Reason == string(v1alpha1.ReasonManualPromote) {
		return v1alpha1.ReasonManualPromote
	}
	return v1alpha1.ReasonPromoted
}

// toRest ends the first step: the router's Deployment takes the
// candidate.
func (r *restart) toRest() RestartAction {
	r.startStep(1)
	if r.promotedBy == v1alpha1.ReasonManualPromote {
		r.st.Measurements = []v1alpha1.Measurement{{At: r.at, Verdict: v1alpha1.VerdictSuccessful, Reason: string(v1alpha1.ReasonManualPromote),
			Message: "promoted by annotation " + v1alpha1.PromoteAnnotation}}
	}
	r.promotedBy = ""
	r.event(false, string(v1alpha1.ReasonStep), "Advance", "candidate %s rolls out to the rest of the router's pods (step 2/2)", r.st.CandidateHash)
	r.later(r.set.Interval)
	return RestartPromote
}

// candidatePods are the live pods that run the candidate.
func (r *restart) candidatePods(cand string) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range r.pods.Live {
		if r.obs.RevisionOf(&r.pods.Live[i]) == cand {
			out = append(out, &r.pods.Live[i])
		}
	}
	return out
}

// refusal says why the candidate failed the first step by what restart
// mode can see, or "": its pod restarted, or it is not Ready (or gone
// unready) once the Deployment's progress deadline has passed since the
// step started.
func (r *restart) refusal(cand string) string {
	pods := r.candidatePods(cand)
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				return fmt.Sprintf("candidate pod %s: container %s restarted %d times (%s)", p.Name, cs.Name, cs.RestartCount, containerState(cs))
			}
		}
	}
	started := r.st.StepStartedAt
	if started == nil || r.obs.Now.Sub(started.Time) < r.obs.ReadyWithin {
		return ""
	}
	if len(pods) == 0 {
		msg := fmt.Sprintf("no candidate pod %s after the step started", r.obs.ReadyWithin)
		if r.obs.CandidateProblem != "" {
			msg += ": " + r.obs.CandidateProblem
		}
		return msg
	}
	for _, p := range pods {
		if !podReady(p) {
			states := make([]string, 0, len(p.Status.ContainerStatuses))
			for _, cs := range p.Status.ContainerStatuses {
				states = append(states, cs.Name+" "+containerState(cs))
			}
			if len(states) == 0 {
				states = append(states, "phase "+string(p.Status.Phase))
			}
			return fmt.Sprintf("candidate pod %s not Ready %s after the step started: %s", p.Name, r.obs.ReadyWithin, strings.Join(states, "; "))
		}
	}
	return ""
}

// onePod runs the first step: the candidate pod Ready for the pause of
// spec.steps[0], then the provider's analysis where it can measure.
func (r *restart) onePod(measure Measure, cand string) RestartAction {
	st := r.st
	r.startClock()
	wait := min(r.set.Interval, r.obs.ReadyWithin)
	var ready *corev1.Pod
	var readySince time.Time
	for _, p := range r.candidatePods(cand) {
		if t, ok := readyAt(p); ok {
			ready, readySince = p, t
			break
		}
	}
	if ready == nil {
		r.note = fmt.Sprintf("waiting for the candidate pod to be Ready (at most %s)", r.obs.ReadyWithin)
		r.later(wait)
		return RestartHold
	}
	since := st.StepStartedAt.Time
	if readySince.After(since) {
		since = readySince
	}
	if pause := r.ro.Spec.Steps[0].Pause; pause != nil {
		if left := since.Add(pause.Duration).Sub(r.obs.Now); left > 0 {
			r.note = fmt.Sprintf("candidate pod %s Ready; it must stay Ready until %s", ready.Name, since.Add(pause.Duration).UTC().Format(time.RFC3339))
			r.later(min(left, wait))
			return RestartHold
		}
	}
	if p := r.set.Provider; p == nil || p.Prometheus == nil {
		r.note = "judged by readiness alone: the sidecar provider has no outcomes to measure, since a Dynamo Frontend has no sidecar"
		return r.toRest()
	}
	successes, failures := tally(st.Measurements)
	if successes >= r.set.Count {
		return r.toRest()
	}
	if left := r.due(since).Sub(r.obs.Now); left > 0 {
		r.later(left)
		return RestartHold
	}
	weight := 100
	if r.pods.Total > 0 {
		weight = int((100 + r.pods.Total - 1) / r.pods.Total)
	}
	res := measure(rolloutapi.Stage{Candidate: cand, Stage: rolloutapi.StageCanary, Weight: weight}, since, r.pods)
	r.record(res)
	switch res.Verdict {
	case v1alpha1.VerdictFailed:
		if failures+1 >= r.set.FailureLimit {
			r.rollback(res)
			return RestartRollBack
		}
	case v1alpha1.VerdictSuccessful:
		if successes+1 >= r.set.Count {
			return r.toRest()
		}
	default:
		st.Phase, r.pausedBy = v1alpha1.RolloutPaused, v1alpha1.ReasonInconclusive
		r.event(true, string(v1alpha1.ReasonInconclusive), "Analyze", "step 1/2 (%s) paused: %s", RestartStepOnePod, res.Message)
		return RestartHold
	}
	r.later(r.set.Interval)
	return RestartHold
}

// readyAt returns when a pod became Ready, if it is.
func readyAt(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

func podReady(p *corev1.Pod) bool {
	_, ok := readyAt(p)
	return ok
}

// containerState says a container's state for a person: waiting with its
// reason, or terminated with its exit code, and its last termination.
func containerState(cs corev1.ContainerStatus) string {
	var s string
	switch {
	case cs.State.Waiting != nil:
		s = "waiting: " + cs.State.Waiting.Reason
		if cs.State.Waiting.Message != "" {
			s += " (" + cs.State.Waiting.Message + ")"
		}
	case cs.State.Terminated != nil:
		s = fmt.Sprintf("terminated: exit code %d %s", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
	case cs.State.Running != nil:
		s = "running"
	default:
		s = "no state"
	}
	if t := cs.LastTerminationState.Terminated; t != nil {
		s += fmt.Sprintf("; last terminated: exit code %d %s", t.ExitCode, t.Reason)
		if t.Message != "" {
			s += ": " + clip(t.Message, 256)
		}
	}
	return s
}

// findTrue returns the reason of a condition of type t that is True, or "".
func findTrue(conds []metav1.Condition, t v1alpha1.ConditionType) string {
	for _, c := range conds {
		if c.Type == string(t) && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// ChangedRoles returns the RouterRoles, by name, whose entries of a
// compiled config (its sources annotation) differ from another's.
func ChangedRoles(sources, stableSources string) map[string]bool {
	return changedRoles(sources, stableSources)
}
