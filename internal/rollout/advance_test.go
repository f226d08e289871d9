package rollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

const (
	stableH = "aaaaaaaaaaaaaaaa"
	candH   = "bbbbbbbbbbbbbbbb"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testRollout() *v1alpha1.RouterRollout {
	count, limit := int32(2), int32(1)
	return &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 1},
		Spec: v1alpha1.RouterRolloutSpec{
			Router: "router",
			Steps: []v1alpha1.RolloutStep{
				{Shadow: &v1alpha1.ShadowStep{}},
				{Canary: &v1alpha1.CanaryStep{Weight: 10}, Pause: &metav1.Duration{Duration: time.Minute}},
			},
			Analysis: v1alpha1.RolloutAnalysis{Interval: &metav1.Duration{Duration: 10 * time.Second}, Count: &count, FailureLimit: &limit},
		},
	}
}

// pod is a router pod whose sidecar reports cs.
func pod(name string, cs *rolloutapi.ConfigStatus) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if cs != nil {
		b, _ := json.Marshal(cs)
		p.Annotations = map[string]string{rolloutapi.ConfigStatusAnnotation: string(b)}
	}
	return p
}

// onStage is a pod running stable and the candidate at st.
func onStage(name string, st rolloutapi.Stage) corev1.Pod {
	return pod(name, &rolloutapi.ConfigStatus{Assigned: stableH, Active: stableH, LastKnownGood: stableH,
		Candidate: &rolloutapi.CandidateStatus{Assigned: st.Candidate, Active: st.Candidate, Stage: st.Stage, Weight: st.Weight}})
}

// script is a Measure that returns its results in turn and counts calls.
type script struct {
	results []Result
	calls   int
	// since are the windows' starts it was asked for, in turn.
	since []time.Time
}

func (s *script) measure(_ rolloutapi.Stage, since time.Time, _ Pods) Result {
	s.calls++
	s.since = append(s.since, since)
	if len(s.results) == 0 {
		return Result{Verdict: v1alpha1.VerdictSuccessful}
	}
	r := s.results[0]
	s.results = s.results[1:]
	return r
}

// step runs Advance and applies the decision to ro, as the reconciler
// does.
func step(t *testing.T, ro *v1alpha1.RouterRollout, obs Observed, m Measure) Decision {
	t.Helper()
	d, err := Advance(ro, obs, m)
	if err != nil {
		t.Fatal(err)
	}
	ro.Status = d.Status
	for _, k := range d.Consumed {
		delete(ro.Annotations, k)
	}
	return d
}

func cond(ro *v1alpha1.RouterRollout, t v1alpha1.ConditionType) string {
	c := meta.FindStatusCondition(ro.Status.Conditions, string(t))
	if c == nil {
		return "absent"
	}
	return string(c.Status) + "/" + c.Reason
}

func TestAdvanceThroughStepsToPromotion(t *testing.T) {
	ro := testRollout()
	s := &script{}
	shadow := rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageShadow}
	canary := rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageCanary, Weight: 10}

	// Idle: the stable config is adopted from the ConfigMap.
	step(t, ro, Observed{Stable: stableH, Now: t0, Pods: []corev1.Pod{pod("p0", &rolloutapi.ConfigStatus{Active: stableH})}}, s.measure)
	if ro.Status.Phase != v1alpha1.RolloutIdle || ro.Status.StableHash != stableH || cond(ro, v1alpha1.ConditionReady) != "True/Idle" {
		t.Fatalf("idle: %+v", ro.Status)
	}

	// The candidate is staged: step 1 starts; the pods do not run it yet.
	pending := []corev1.Pod{pod("p0", &rolloutapi.ConfigStatus{Active: stableH}), pod("p1", &rolloutapi.ConfigStatus{Active: stableH})}
	d := step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0, Pods: pending}, s.measure)
	if ro.Status.Phase != v1alpha1.RolloutProgressing || ro.Status.CandidateHash != candH || ro.Status.CurrentStep != 0 || s.calls != 0 {
		t.Fatalf("staged: %+v, %d calls", ro.Status, s.calls)
	}
	if cond(ro, v1alpha1.ConditionReconciling) != "True/Step" || cond(ro, v1alpha1.ConditionReady) != "False/CandidateInFlight" {
		t.Errorf("staged conditions: %v", ro.Status.Conditions)
	}
	if len(d.Events) != 1 || d.Events[0].Action != "Stage" {
		t.Errorf("events: %+v", d.Events)
	}

	// Every pod runs it: the first measurement waits an interval.
	running := []corev1.Pod{onStage("p0", shadow), onStage("p1", shadow)}
	d = step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(5 * time.Second), Pods: running}, s.measure)
	if s.calls != 0 || d.After != 5*time.Second {
		t.Fatalf("before the interval: %d calls, after %v", s.calls, d.After)
	}
	if got := ro.Status.Pods.Summary; got != "2/2" {
		t.Errorf("pods summary %q", got)
	}
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(10 * time.Second), Pods: running}, s.measure)
	if s.calls != 1 || len(ro.Status.Measurements) != 1 || ro.Status.CurrentStep != 0 {
		t.Fatalf("first measurement: %d calls, %+v", s.calls, ro.Status)
	}
	// A second reconcile at the same time takes no measurement again.
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(11 * time.Second), Pods: running}, s.measure)
	if s.calls != 1 {
		t.Fatalf("measurement repeated: %d calls", s.calls)
	}
	// The second Successful measurement ends the shadow step (no pause).
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(20 * time.Second), Pods: running}, s.measure)
	if s.calls != 2 || ro.Status.CurrentStep != 1 || len(ro.Status.Measurements) != 0 || !ro.Status.StepStartedAt.Time.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("step 2: %d calls, %+v", s.calls, ro.Status)
	}
	// Canary: pods on the shadow stage do not count as on the step.
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(40 * time.Second), Pods: running}, s.measure)
	if s.calls != 2 || ro.Status.Pods.OnCandidate != 0 {
		t.Fatalf("canary before pods: %d calls, %+v", s.calls, ro.Status.Pods)
	}
	on := []corev1.Pod{onStage("p0", canary), onStage("p1", canary)}
	for _, at := range []time.Duration{40, 50} {
		step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(at * time.Second), Pods: on}, s.measure)
	}
	// Two Successful measurements, but the step's pause (1m) holds it.
	if s.calls != 4 || ro.Status.CurrentStep != 1 || ro.Status.Phase != v1alpha1.RolloutProgressing {
		t.Fatalf("canary measured: %d calls, %+v", s.calls, ro.Status)
	}
	if !strings.Contains(meta.FindStatusCondition(ro.Status.Conditions, "Progressing").Message, "step 2/2 (canary 10%): 2 of 2 pods on candidate "+candH) {
		t.Errorf("Progressing message: %q", meta.FindStatusCondition(ro.Status.Conditions, "Progressing").Message)
	}
	d = step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(80 * time.Second), Pods: on}, s.measure)
	if s.calls != 4 || ro.Status.Phase != v1alpha1.RolloutPromoted || ro.Status.StableHash != candH || ro.Status.CandidateHash != "" {
		t.Fatalf("promoted: %d calls, %+v", s.calls, ro.Status)
	}
	if cond(ro, v1alpha1.ConditionReady) != "True/Promoted" || cond(ro, v1alpha1.ConditionReconciling) != "absent" || cond(ro, v1alpha1.ConditionPromoted) != "True/Promoted" {
		t.Errorf("promoted conditions: %v", ro.Status.Conditions)
	}
	// The ConfigMap still stages the candidate until the router
	// reconciler writes it as stable: not a new candidate.
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(81 * time.Second), Pods: on}, s.measure)
	if ro.Status.Phase != v1alpha1.RolloutPromoted || ro.Status.StableHash != candH {
		t.Fatalf("after promotion, before the ConfigMap follows: %+v", ro.Status)
	}
	step(t, ro, Observed{Stable: candH, Now: t0.Add(82 * time.Second)}, s.measure)
	if ro.Status.Phase != v1alpha1.RolloutPromoted || ro.Status.StableHash != candH {
		t.Fatalf("after the ConfigMap follows: %+v", ro.Status)
	}
}

func TestAdvanceFailedRollsBack(t *testing.T) {
	ro := testRollout()
	shadow := rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageShadow}
	running := []corev1.Pod{onStage("p0", shadow)}
	s := &script{results: []Result{{Verdict: v1alpha1.VerdictFailed, Reason: "PrefixHitDrop", Metric: "prefixHitRatio",
		Baseline: "0.62", Canary: "0.41", PValue: "0.0001", Samples: &v1alpha1.SampleCounts{Baseline: 900, Canary: 100}, Message: "hit ratio fell"}}}
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0, Pods: running}, s.measure)
	d := step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(10 * time.Second), Pods: running}, s.measure)
	rb := ro.Status.LastRollback
	if ro.Status.Phase != v1alpha1.RolloutRolledBack || rb == nil || rb.Hash != candH || rb.Reason != "PrefixHitDrop" ||
		rb.Baseline != "0.62" || rb.Canary != "0.41" || rb.Samples.Canary != 100 || rb.ConfigMap != "router-hints-"+candH {
		t.Fatalf("rolled back: %+v %+v", ro.Status, rb)
	}
	if cond(ro, v1alpha1.ConditionStalled) != "True/PrefixHitDrop" || cond(ro, v1alpha1.ConditionReady) != "False/RolledBack" || cond(ro, v1alpha1.ConditionRolledBack) != "True/PrefixHitDrop" {
		t.Errorf("conditions: %v", ro.Status.Conditions)
	}
	if len(d.Events) != 1 || !d.Events[0].Warning || !strings.Contains(d.Events[0].Message, "prefixHitRatio baseline 0.62, canary 0.41, p=0.0001, samples 900/100") {
		t.Errorf("events: %+v", d.Events)
	}
	// The ConfigMap still stages it: not picked up again.
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(11 * time.Second)}, s.measure)
	if ro.Status.Phase != v1alpha1.RolloutRolledBack || ro.Status.CandidateHash != "" {
		t.Fatalf("after rollback: %+v", ro.Status)
	}
	// A new candidate clears Stalled.
	step(t, ro, Observed{Stable: stableH, Candidate: "cccccccccccccccc", Now: t0.Add(12 * time.Second)}, s.measure)
	if ro.Status.Phase != v1alpha1.RolloutProgressing || cond(ro, v1alpha1.ConditionStalled) != "absent" || ro.Status.LastRollback.Hash != candH {
		t.Fatalf("new candidate: %+v", ro.Status)
	}
}

func TestAdvanceRefusedCandidateFailsAtOnce(t *testing.T) {
	ro := testRollout()
	refusing := pod("p1", &rolloutapi.ConfigStatus{Active: stableH, Candidate: &rolloutapi.CandidateStatus{Assigned: candH, Error: "role decode: unknown hint type x"}})
	s := &script{}
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0, Pods: []corev1.Pod{onStage("p0", rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageShadow}), refusing}}, s.measure)
	rb := ro.Status.LastRollback
	if s.calls != 0 || ro.Status.Phase != v1alpha1.RolloutRolledBack || rb.Reason != "CandidateRefused" || !strings.Contains(rb.Message, "pod p1 refused candidate "+candH+": role decode: unknown hint type x") {
		t.Fatalf("%d calls, %+v", s.calls, rb)
	}
}

func TestAdvanceInconclusivePausesUntilResumed(t *testing.T) {
	ro := testRollout()
	s := &script{results: []Result{{Verdict: v1alpha1.VerdictInconclusive, Reason: "TooFewSamples", Message: "0 of 100 samples"}}}
	running := []corev1.Pod{onStage("p0", rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageShadow})}
	obs := func(at time.Duration) Observed {
		return Observed{Stable: stableH, Candidate: candH, Now: t0.Add(at * time.Second), Pods: running}
	}
	step(t, ro, obs(0), s.measure)
	step(t, ro, obs(10), s.measure)
	if ro.Status.Phase != v1alpha1.RolloutPaused || cond(ro, v1alpha1.ConditionPaused) != "True/Inconclusive" || cond(ro, v1alpha1.ConditionReconciling) != "True/Inconclusive" {
		t.Fatalf("paused: %+v", ro.Status)
	}
	// Paused: no measurement, however long.
	step(t, ro, obs(100), s.measure)
	if s.calls != 1 || ro.Status.Phase != v1alpha1.RolloutPaused {
		t.Fatalf("while paused: %d calls, %s", s.calls, ro.Status.Phase)
	}
	// An annotation naming another candidate does nothing.
	ro.Annotations = map[string]string{v1alpha1.ResumeAnnotation: "cccccccccccccccc"}
	step(t, ro, obs(101), s.measure)
	if ro.Status.Phase != v1alpha1.RolloutPaused {
		t.Fatalf("resumed by another hash: %s", ro.Status.Phase)
	}
	ro.Annotations = map[string]string{v1alpha1.ResumeAnnotation: candH}
	d := step(t, ro, obs(102), s.measure)
	// Resumed, the step's clock restarts: no measurement of the samples
	// of the pause at once, the next an interval on, of what came since.
	if ro.Status.Phase != v1alpha1.RolloutProgressing || len(d.Consumed) != 1 || s.calls != 1 || d.After != 10*time.Second {
		t.Fatalf("resumed: %s, consumed %v, %d calls, after %v", ro.Status.Phase, d.Consumed, s.calls, d.After)
	}
	step(t, ro, obs(112), s.measure)
	if s.calls != 2 || !s.since[1].Equal(t0.Add(102*time.Second)) {
		t.Fatalf("after resume: %d calls, windows from %v", s.calls, s.since)
	}
}

// TestAdvancePausedTimeIsNotTheStepsTime: a step held by spec.paused for
// five minutes and resumed is judged on what came after the resume, and
// its pause (one minute) counts from the resume. Before, the first
// reconcile after the resume measured at once, over a window that held
// the whole pause, and the step's minute had long passed: the candidate
// was promoted the moment the rollout resumed.
func TestAdvancePausedTimeIsNotTheStepsTime(t *testing.T) {
	ro := testRollout()
	started := metav1.NewMicroTime(t0)
	ro.Status = v1alpha1.RouterRolloutStatus{Phase: v1alpha1.RolloutProgressing, StableHash: stableH, CandidateHash: candH, CurrentStep: 1, StepStartedAt: &started}
	on := []corev1.Pod{onStage("p0", rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageCanary, Weight: 10})}
	obs := func(at time.Duration) Observed {
		return Observed{Stable: stableH, Candidate: candH, Now: t0.Add(at * time.Second), Pods: on}
	}
	figures := "no metric worse beyond its threshold: prefix-hit ratio 0.4100 -> 0.4300 (p=0.91)"
	s := &script{results: []Result{{Verdict: v1alpha1.VerdictSuccessful, Message: "before the pause"}, {Verdict: v1alpha1.VerdictSuccessful, Message: figures}}}
	step(t, ro, obs(10), s.measure)
	if s.calls != 1 || !s.since[0].Equal(t0) {
		t.Fatalf("first measurement: %d calls, windows from %v", s.calls, s.since)
	}
	ro.Spec.Paused = true
	step(t, ro, obs(15), s.measure)
	step(t, ro, obs(300), s.measure)
	if ro.Status.Phase != v1alpha1.RolloutPaused || s.calls != 1 {
		t.Fatalf("paused: %s, %d calls", ro.Status.Phase, s.calls)
	}

	ro.Spec.Paused = false
	resumed := t0.Add(300 * time.Second)
	d := step(t, ro, obs(300), s.measure)
	if ro.Status.Phase != v1alpha1.RolloutProgressing || s.calls != 1 || d.After != 10*time.Second {
		t.Fatalf("at the resume: %s, %d calls, after %v", ro.Status.Phase, s.calls, d.After)
	}
	if ro.Status.StepStartedAt == nil || !ro.Status.StepStartedAt.Time.Equal(resumed) || len(ro.Status.Measurements) != 1 {
		t.Fatalf("at the resume: step clock %v, %d measurements (the one before the pause is kept)", ro.Status.StepStartedAt, len(ro.Status.Measurements))
	}

	// The second measurement (count 2) is due an interval after the
	// resume and judges only what came since.
	d = step(t, ro, obs(310), s.measure)
	if s.calls != 2 || !s.since[1].Equal(resumed) {
		t.Fatalf("after the resume: %d calls, windows from %v", s.calls, s.since)
	}
	// Both measurements are taken, but the step's minute runs from the
	// resume: 50s are left.
	if ro.Status.Phase != v1alpha1.RolloutProgressing || ro.Status.CurrentStep != 1 || d.After != 50*time.Second {
		t.Fatalf("before the step's pause: %s step %d, after %v", ro.Status.Phase, ro.Status.CurrentStep, d.After)
	}
	// A kstatus reader sees the Successful measurement's figures in the
	// condition, not only its verdict.
	if msg := meta.FindStatusCondition(ro.Status.Conditions, "Progressing").Message; !strings.Contains(msg, "last Successful: "+figures) {
		t.Errorf("Progressing message: %q", msg)
	}
	step(t, ro, obs(360), s.measure)
	if ro.Status.Phase != v1alpha1.RolloutPromoted {
		t.Fatalf("a minute after the resume: %s", ro.Status.Phase)
	}
}

func TestAdvanceManualControl(t *testing.T) {
	for _, tc := range []struct {
		ann   string
		phase v1alpha1.RolloutPhase
	}{
		{v1alpha1.PromoteAnnotation, v1alpha1.RolloutPromoted},
		{v1alpha1.AbortAnnotation, v1alpha1.RolloutRolledBack},
	} {
		t.Run(tc.ann, func(t *testing.T) {
			ro := testRollout()
			s := &script{}
			step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0}, s.measure)
			ro.Spec.Paused = true
			step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(time.Second)}, s.measure)
			if ro.Status.Phase != v1alpha1.RolloutPaused || cond(ro, v1alpha1.ConditionPaused) != "True/Paused" {
				t.Fatalf("spec.paused: %+v", ro.Status)
			}
			ro.Annotations = map[string]string{tc.ann: candH}
			d := step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(2 * time.Second)}, s.measure)
			if ro.Status.Phase != tc.phase || fmt.Sprint(d.Consumed) != "["+tc.ann+"]" || s.calls != 0 {
				t.Fatalf("%s: %s, consumed %v", tc.ann, ro.Status.Phase, d.Consumed)
			}
		})
	}
}

// A manager that restarts reads the status it wrote: the measurement
// recorded is not taken again, and the next is due an interval after it.
func TestAdvanceResumesFromStatus(t *testing.T) {
	ro := testRollout()
	started := metav1.NewMicroTime(t0)
	ro.Status = v1alpha1.RouterRolloutStatus{
		Phase: v1alpha1.RolloutProgressing, StableHash: stableH, CandidateHash: candH, CurrentStep: 1, StepStartedAt: &started,
		Measurements: []v1alpha1.Measurement{{At: metav1.NewMicroTime(t0.Add(10 * time.Second)), Verdict: v1alpha1.VerdictSuccessful}},
	}
	on := []corev1.Pod{onStage("p0", rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageCanary, Weight: 10})}
	s := &script{}
	d := step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(15 * time.Second), Pods: on}, s.measure)
	if s.calls != 0 || d.After != 5*time.Second || ro.Status.CurrentStep != 1 {
		t.Fatalf("before due: %d calls, after %v, %+v", s.calls, d.After, ro.Status)
	}
	step(t, ro, Observed{Stable: stableH, Candidate: candH, Now: t0.Add(20 * time.Second), Pods: on}, s.measure)
	if s.calls != 1 || len(ro.Status.Measurements) != 2 {
		t.Fatalf("due: %d calls, %d measurements", s.calls, len(ro.Status.Measurements))
	}
}

func TestSettingsDefaults(t *testing.T) {
	s, err := SettingsOf(v1alpha1.RolloutAnalysis{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Interval != 30*time.Second || s.Count != 3 || s.FailureLimit != 1 || s.MinSamples != 100 || s.Significance != 0.05 ||
		s.MaxPrefixHitDrop != 0.02 || s.MaxTTFTIncrease != 0.2 || s.MaxErrorRateIncrease != 0.01 {
		t.Errorf("defaults: %+v", s)
	}
	if _, err := SettingsOf(v1alpha1.RolloutAnalysis{Significance: "x"}); err == nil || !strings.Contains(err.Error(), "spec.analysis.significance") {
		t.Errorf("bad significance: %v", err)
	}
}

func TestAdvanceRestartModeRouter(t *testing.T) {
	ro := testRollout()
	step(t, ro, Observed{Stable: stableH, Now: t0, RestartMode: true}, (&script{}).measure)
	if ro.Status.Phase != v1alpha1.RolloutIdle || cond(ro, v1alpha1.ConditionReady) != "True/RestartModeRouter" {
		t.Fatalf("%+v", ro.Status)
	}
}
