package rollout

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// restartPod is a router pod whose router reads the config hash rev;
// readySince zero: not Ready.
func restartPod(name, rev string, readySince time.Time, restarts int32) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"rev": rev}}}
	p.Status.Phase = corev1.PodRunning
	cs := corev1.ContainerStatus{Name: "frontend", RestartCount: restarts}
	if restarts > 0 {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "unknown kv_hint_policy type"}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	if !readySince.IsZero() {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)}}
	}
	return p
}

func restartObs(now time.Time, stable string, pods ...corev1.Pod) RestartObserved {
	return RestartObserved{
		Now: now, Stable: stable, Compiled: candH, Pods: pods, ReadyWithin: 2 * time.Minute,
		RevisionOf: func(p *corev1.Pod) string { return p.Annotations["rev"] },
	}
}

func noMeasure(t *testing.T) Measure {
	return func(_ rolloutapi.Stage, _ time.Time, _ Pods) Result {
		t.Fatal("measured with the sidecar provider")
		return Result{}
	}
}

// TestRestartOnePodThenTheRest walks a candidate through both steps: the
// one pod Ready for the first step's pause, then the router Deployment's
// own rollout, with the sidecar provider (readiness alone, said so).
func TestRestartOnePodThenTheRest(t *testing.T) {
	ro := testRollout()
	ro.Spec.Steps[0].Pause = &metav1.Duration{Duration: 30 * time.Second}
	stable := []corev1.Pod{restartPod("r-1", stableH, t0, 0), restartPod("r-2", stableH, t0, 0)}

	d, act, err := AdvanceRestart(ro, restartObs(t0, stableH, stable...), noMeasure(t))
	if err != nil || act != RestartHold || d.Status.CandidateHash != candH || d.Status.CurrentStep != 0 || d.Status.Phase != v1alpha1.RolloutProgressing {
		t.Fatalf("new candidate: %v, action %q, status %+v", err, act, d.Status)
	}
	ro.Status = d.Status

	// The candidate pod is Ready 5s later; 20s later it has not been
	// Ready for the pause yet.
	pods := append(stable, restartPod("r-candidate-1", candH, t0.Add(5*time.Second), 0))
	d, act, _ = AdvanceRestart(ro, restartObs(t0.Add(25*time.Second), stableH, pods...), noMeasure(t))
	if act != RestartHold || d.Status.CurrentStep != 0 || d.Status.Pods.Summary != "1/3" {
		t.Fatalf("within the pause: action %q, step %d, pods %+v", act, d.Status.CurrentStep, d.Status.Pods)
	}
	ro.Status = d.Status

	d, act, _ = AdvanceRestart(ro, restartObs(t0.Add(36*time.Second), stableH, pods...), noMeasure(t))
	c := meta.FindStatusCondition(d.Status.Conditions, string(v1alpha1.ConditionProgressing))
	if act != RestartPromote || d.Status.CurrentStep != 1 || c == nil || !strings.Contains(c.Message, "step 2/2 (the rest)") || !strings.Contains(c.Message, "readiness alone") {
		t.Fatalf("after the pause: action %q, step %d, Progressing %+v", act, d.Status.CurrentStep, c)
	}
	ro.Status = d.Status

	// The router Deployment now mounts the candidate; its rollout runs.
	mid := []corev1.Pod{restartPod("r-3", candH, t0.Add(40*time.Second), 0), stable[1]}
	o := restartObs(t0.Add(41*time.Second), candH, mid...)
	d, act, _ = AdvanceRestart(ro, o, noMeasure(t))
	if act != RestartPromote || d.Status.Phase != v1alpha1.RolloutProgressing || d.Status.StableHash != stableH || d.Status.Pods.Summary != "1/2" {
		t.Fatalf("during the rest: action %q, status %+v", act, d.Status)
	}
	ro.Status = d.Status
	o.RouterRolled, o.Pods = true, []corev1.Pod{mid[0], restartPod("r-4", candH, t0.Add(45*time.Second), 0)}
	d, _, _ = AdvanceRestart(ro, o, noMeasure(t))
	if d.Status.Phase != v1alpha1.RolloutPromoted || d.Status.StableHash != candH || d.Status.CandidateHash != "" {
		t.Fatalf("rolled: status %+v", d.Status)
	}
}

// TestRestartCandidateRefused: a candidate pod that restarts, or that is
// not Ready by the progress deadline, fails the first step with
// CandidateRefused naming the pod and its container's state; an abort
// rolls back; each removes the candidate and leaves the stable config.
func TestRestartCandidateRefused(t *testing.T) {
	stable := restartPod("r-1", stableH, t0, 0)
	for _, tc := range []struct {
		name   string
		at     time.Duration
		cand   []corev1.Pod
		abort  bool
		reason v1alpha1.ConditionReason
		says   []string
	}{
		{"restarted", 10 * time.Second, []corev1.Pod{restartPod("c-1", candH, time.Time{}, 2)}, false, v1alpha1.ReasonCandidateRefused,
			[]string{"candidate pod c-1", "container frontend restarted 2 times", "CrashLoopBackOff", "unknown kv_hint_policy type"}},
		{"never ready", 3 * time.Minute, []corev1.Pod{restartPod("c-1", candH, time.Time{}, 0)}, false, v1alpha1.ReasonCandidateRefused,
			[]string{"candidate pod c-1 not Ready 2m0s", "frontend no state"}},
		{"no pod", 3 * time.Minute, nil, false, v1alpha1.ReasonCandidateRefused, []string{"no candidate pod 2m0s", "exceeded quota"}},
		{"aborted", 10 * time.Second, []corev1.Pod{restartPod("c-1", candH, t0, 0)}, true, v1alpha1.ReasonAborted, []string{"aborted by annotation"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := testRollout()
			d, _, _ := AdvanceRestart(ro, restartObs(t0, stableH, stable), noMeasure(t))
			ro.Status = d.Status
			if tc.abort {
				ro.Annotations = map[string]string{v1alpha1.AbortAnnotation: candH}
			}
			o := restartObs(t0.Add(tc.at), stableH, append([]corev1.Pod{stable}, tc.cand...)...)
			o.CandidateProblem = "pods \"c-1\" is forbidden: exceeded quota"
			d, act, _ := AdvanceRestart(ro, o, noMeasure(t))
			rb := d.Status.LastRollback
			if act != RestartRollBack || d.Status.Phase != v1alpha1.RolloutRolledBack || rb == nil || rb.Reason != string(tc.reason) || d.Status.StableHash != stableH {
				t.Fatalf("action %q, status %+v", act, d.Status)
			}
			for _, s := range tc.says {
				if !strings.Contains(rb.Message, s) {
					t.Errorf("rollback says %q; want %q in it", rb.Message, s)
				}
			}
			// The next look keeps it rolled back, the candidate gone.
			ro.Status, ro.Annotations = d.Status, nil
			d, act, _ = AdvanceRestart(ro, restartObs(t0.Add(tc.at+time.Second), stableH, stable), noMeasure(t))
			if act != RestartRollBack || d.Status.Phase != v1alpha1.RolloutRolledBack {
				t.Errorf("after: action %q, phase %s", act, d.Status.Phase)
			}
		})
	}
}

// prometheusFirstStep is a restart-mode rollout with the Prometheus
// provider whose candidate was staged at t0, and its pods once the
// candidate pod has been Ready since t0+1s.
func prometheusFirstStep() (*v1alpha1.RouterRollout, []corev1.Pod) {
	ro := testRollout()
	ro.Spec.Analysis.Provider = &v1alpha1.MetricsProvider{Prometheus: &v1alpha1.PrometheusProvider{}}
	stable := restartPod("r-1", stableH, t0, 0)
	d, _, _ := AdvanceRestart(ro, restartObs(t0, stableH, stable), nil)
	ro.Status = d.Status
	return ro, []corev1.Pod{stable, restartPod("c-1", candH, t0.Add(time.Second), 0)}
}

// TestRestartPrometheusJudges: with the Prometheus provider the first
// step also takes its measurements once the pod has been Ready for the
// pause; a Failed one rolls back with its figures.
func TestRestartPrometheusJudges(t *testing.T) {
	ro, pods := prometheusFirstStep()
	calls := 0
	m := func(st rolloutapi.Stage, since time.Time, _ Pods) Result {
		calls++
		if st.Candidate != candH || !since.Equal(t0.Add(time.Second)) {
			t.Errorf("measured %+v since %s", st, since)
		}
		return Result{Verdict: v1alpha1.VerdictFailed, Reason: "Failed", Metric: "prefixHitRatio", Baseline: "0.60", Canary: "0.40"}
	}
	d, act, _ := AdvanceRestart(ro, restartObs(t0.Add(5*time.Second), stableH, pods...), m)
	if calls != 0 || act != RestartHold {
		t.Fatalf("before the interval: %d calls, action %q", calls, act)
	}
	ro.Status = d.Status
	d, act, _ = AdvanceRestart(ro, restartObs(t0.Add(12*time.Second), stableH, pods...), m)
	if calls != 1 || act != RestartRollBack || d.Status.LastRollback == nil || d.Status.LastRollback.Metric != "prefixHitRatio" {
		t.Fatalf("after the interval: %d calls, action %q, status %+v", calls, act, d.Status)
	}
}

// TestRestartCarriesOn: what a manager restarted between its status write
// and its Deployment write, or a change of the roles mid-step, finds. A
// promotion whose release is not written yet (the hold still records the
// stable hash) asks for the release again, still at step 2/2; a
// candidate withdrawn mid-step releases the hold; a resume counts the
// steps out of restart mode's two, whatever spec.steps holds.
func TestRestartCarriesOn(t *testing.T) {
	ro := testRollout()
	ro.Spec.Steps = append(ro.Spec.Steps, v1alpha1.RolloutStep{Canary: &v1alpha1.CanaryStep{Weight: 50}})
	stable := restartPod("r-1", stableH, t0, 0)
	d, _, _ := AdvanceRestart(ro, restartObs(t0, stableH, stable), noMeasure(t))
	ro.Status = d.Status

	paused := ro.DeepCopy()
	paused.Spec.Paused = true
	d, act, _ := AdvanceRestart(paused, restartObs(t0.Add(time.Second), stableH, stable), noMeasure(t))
	if act != RestartHold || d.Status.Phase != v1alpha1.RolloutPaused {
		t.Fatalf("spec.paused: action %q, phase %s", act, d.Status.Phase)
	}
	paused.Status, paused.Spec.Paused = d.Status, false
	d, _, _ = AdvanceRestart(paused, restartObs(t0.Add(2*time.Second), stableH, stable), noMeasure(t))
	if len(d.Events) == 0 || d.Events[0].Action != "Resume" || !strings.HasSuffix(d.Events[0].Message, "at step 1/2") {
		t.Errorf("resume events %+v; want one at step 1/2", d.Events)
	}

	rest := ro.DeepCopy()
	rest.Status.CurrentStep = 1
	d, act, _ = AdvanceRestart(rest, restartObs(t0.Add(time.Minute), stableH, stable), noMeasure(t))
	if act != RestartPromote || d.Status.CurrentStep != 1 || d.Status.Phase != v1alpha1.RolloutProgressing || d.Status.CandidateHash != candH {
		t.Errorf("promotion not yet written: action %q, status %+v", act, d.Status)
	}

	o := restartObs(t0.Add(time.Minute), stableH, stable)
	o.Compiled = stableH
	d, act, _ = AdvanceRestart(ro, o, noMeasure(t))
	if act != RestartRelease || d.Status.Phase != v1alpha1.RolloutIdle || d.Status.CandidateHash != "" {
		t.Errorf("withdrawn: action %q, status %+v", act, d.Status)
	}
}

// TestRestartPausedTimeIsNotTheStepsTime: in restart mode too, a first
// step paused (spec.paused) and resumed restarts its clock: no
// measurement at the resume, the next one an interval later over the
// outcomes since the resume, and every measurement keeps each judged
// metric's figures.
func TestRestartPausedTimeIsNotTheStepsTime(t *testing.T) {
	ro, pods := prometheusFirstStep()
	var sinces []time.Time
	m := func(_ rolloutapi.Stage, since time.Time, _ Pods) Result {
		sinces = append(sinces, since)
		return Result{Verdict: v1alpha1.VerdictSuccessful, Reason: "Successful", Message: "no harm", Metrics: []v1alpha1.MetricMeasurement{
			{Metric: "prefixHitRatio", Verdict: v1alpha1.MetricSuccessful, Baseline: "0.50", Canary: "0.51"},
			{Metric: "errorRate", Verdict: v1alpha1.MetricSuccessful, Baseline: "0", Canary: "0"},
		}}
	}
	d, act, _ := AdvanceRestart(ro, restartObs(t0.Add(12*time.Second), stableH, pods...), m)
	if len(sinces) != 1 || act != RestartHold || len(d.Status.Measurements) != 1 || len(d.Status.Measurements[0].Metrics) != 2 {
		t.Fatalf("first measurement: %d calls, action %q, measurements %+v", len(sinces), act, d.Status.Measurements)
	}
	ro.Status = d.Status

	ro.Spec.Paused = true
	d, _, _ = AdvanceRestart(ro, restartObs(t0.Add(15*time.Second), stableH, pods...), m)
	if d.Status.Phase != v1alpha1.RolloutPaused {
		t.Fatalf("spec.paused: phase %s", d.Status.Phase)
	}
	ro.Status = d.Status

	ro.Spec.Paused = false
	resume := t0.Add(300 * time.Second)
	d, act, _ = AdvanceRestart(ro, restartObs(resume, stableH, pods...), m)
	if len(sinces) != 1 || act != RestartHold || d.Status.StepStartedAt == nil || !d.Status.StepStartedAt.Time.Equal(resume) {
		t.Fatalf("at the resume: %d calls, action %q, step started %v", len(sinces), act, d.Status.StepStartedAt)
	}
	ro.Status = d.Status

	d, act, _ = AdvanceRestart(ro, restartObs(resume.Add(11*time.Second), stableH, pods...), m)
	if len(sinces) != 2 || !sinces[1].Equal(resume) || act != RestartPromote {
		t.Fatalf("after the resume: %d calls, since %v, action %q", len(sinces), sinces, act)
	}
}

// TestRestartWaitsForTheOwnersPause: a router Deployment its owner paused
// is not held (holding would unpause it): the first step waits, says why,
// and its candidate-pod deadline counts from the unpause, so a long
// owner's pause is no refusal.
func TestRestartWaitsForTheOwnersPause(t *testing.T) {
	ro := testRollout()
	stable := restartPod("r-1", stableH, t0, 0)
	obs := restartObs(t0, stableH, stable)
	obs.OwnerPaused = true
	d, act, _ := AdvanceRestart(ro, obs, noMeasure(t))
	if act != RestartKeep || d.Status.CandidateHash != candH {
		t.Fatalf("owner-paused: action %q, status %+v", act, d.Status)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, string(v1alpha1.ConditionProgressing)); c == nil || !strings.Contains(c.Message, "paused by its owner") {
		t.Fatalf("Progressing does not say why it waits: %+v", c)
	}
	ro.Status = d.Status
	obs = restartObs(t0.Add(10*time.Minute), stableH, stable)
	obs.OwnerPaused = true
	d, act, _ = AdvanceRestart(ro, obs, noMeasure(t))
	if act != RestartKeep || d.Status.Phase == v1alpha1.RolloutRolledBack {
		t.Fatalf("10 minutes owner-paused: action %q, phase %s", act, d.Status.Phase)
	}
	ro.Status = d.Status
	d, act, _ = AdvanceRestart(ro, restartObs(t0.Add(11*time.Minute), stableH, stable), noMeasure(t))
	if act != RestartHold || d.Status.Phase != v1alpha1.RolloutProgressing {
		t.Fatalf("unpaused: action %q, phase %s", act, d.Status.Phase)
	}
}
