package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/testing/argocd"
	"github.com/kvrouter/kv-hint-operator/internal/testing/managertest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// judge is the rollout tests' Analysis: it returns the verdict the test
// sets for a candidate's stage (Successful when none is set) and counts
// the measurements it was asked for, by candidate and stage.
type judge struct {
	mu      sync.Mutex
	results map[string]rollout.Result
	calls   map[string]int
}

func newJudge() *judge {
	return &judge{results: map[string]rollout.Result{}, calls: map[string]int{}}
}

func stageKey(st rolloutapi.Stage) string {
	return fmt.Sprintf("%s/%s/%d", st.Candidate, st.Stage, st.Weight)
}

func (j *judge) set(st rolloutapi.Stage, r rollout.Result) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.results[stageKey(st)] = r
}

func (j *judge) count(st rolloutapi.Stage) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.calls[stageKey(st)]
}

func (j *judge) Analyze(_ context.Context, in rollout.Input) rollout.Result {
	j.mu.Lock()
	defer j.mu.Unlock()
	k := stageKey(in.Stage)
	j.calls[k]++
	if r, ok := j.results[k]; ok {
		return r
	}
	return rollout.Result{Verdict: v1alpha1.VerdictSuccessful, Reason: "WithinThresholds", Message: "test judge: Successful"}
}

// withRolloutManager replaces the suite's manager by one whose rollouts
// are judged by j, for the test; the suite's comes back after it.
func withRolloutManager(t *testing.T, j rollout.Analysis) (restart func()) {
	t.Helper()
	stopManager()
	start := func() func() {
		stop, err := managertest.Start(restCfg, managertest.Options{
			Name: "controllers", Scheme: scheme, Restartable: true,
			Controllers: &controllers.Options{CatalogLimits: controllers.DefaultCatalogLimits(), RolloutAnalysis: j},
		})
		if err != nil {
			t.Fatalf("starting the manager: %v", err)
		}
		return stop
	}
	stop := start()
	t.Cleanup(func() {
		stop()
		var err error
		if stopManager, err = startManager(); err != nil {
			t.Fatalf("restarting the suite's manager: %v", err)
		}
	})
	return func() {
		stop()
		stop = start()
	}
}

// sidecars plays the sidecars of pods: each reads the router's ConfigMap
// and reports on its pod, as field manager kvhint-sidecar, the applied
// hash and the config status a sidecar writes (rolloutapi.ConfigStatus):
// the stable config active, and the staged candidate active in its stage,
// unless the pod is told to refuse it (a NACK).
type sidecars struct {
	ns, router string
	mu         sync.Mutex
	refuse     map[string]string // pod -> error
}

func runSidecars(t *testing.T, ns, router string, pods ...*corev1.Pod) *sidecars {
	s := &sidecars{ns: ns, router: router, refuse: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, p := range pods {
		wg.Go(func() {
			last := ""
			for ctx.Err() == nil {
				if cs, hash, ok := s.status(ctx, p.Name); ok {
					b, _ := json.Marshal(cs)
					if string(b) != last {
						patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
							rolloutapi.ConfigStatusAnnotation: string(b), v1alpha1.AppliedHashAnnotation: hash,
						}}})
						if err := k8s.Patch(ctx, p.DeepCopy(), rawMergePatch(patch), client.FieldOwner(v1alpha1.SidecarFieldManager)); err == nil {
							last = string(b)
						}
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
	return s
}

func (s *sidecars) refuseCandidate(pod, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse[pod] = msg
}

func (s *sidecars) status(ctx context.Context, pod string) (*rolloutapi.ConfigStatus, string, bool) {
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: v1alpha1.HintsConfigMapName(s.router)}, cm); err != nil {
		return nil, "", false
	}
	split, err := compiled.Split(cm.Data)
	if err != nil {
		return nil, "", false
	}
	h := compiled.Hash(split.Stable)
	cs := &rolloutapi.ConfigStatus{Assigned: h, Active: h, LastKnownGood: h}
	if st := split.Stage; st != nil {
		s.mu.Lock()
		nack := s.refuse[pod]
		s.mu.Unlock()
		cs.Candidate = &rolloutapi.CandidateStatus{Assigned: st.Candidate, Active: st.Candidate, Stage: st.Stage, Weight: st.Weight}
		if nack != "" {
			cs.Candidate.Active, cs.Candidate.Error = "", nack
		}
	}
	return cs, h, true
}

// rolloutFixture is a router "r" with a decode role, two pods with
// sidecars, its first config H0 written as stable, and a RouterRollout
// with the steps given, judged every second, one measurement a step.
type rolloutFixture struct {
	ns   string
	role *v1alpha1.RouterRole
	ro   *v1alpha1.RouterRollout
	cars *sidecars
	h0   string
}

func newRolloutFixture(t *testing.T, count int32, steps ...v1alpha1.RolloutStep) *rolloutFixture {
	t.Helper()
	f := &rolloutFixture{ns: testenv.NewNamespace(t, k8s, "rollout")}
	f.role = newRole(f.ns, "decode", "r", "decode", "kvcr")
	testenv.Create(t, k8s, f.role)
	p0, p1 := testenv.RouterPod(f.ns, "r-0", "r"), testenv.RouterPod(f.ns, "r-1", "r")
	testenv.Create(t, k8s, p0, p1)
	f.cars = runSidecars(t, f.ns, "r", p0, p1)
	cm := testenv.WaitConfigMap(t, k8s, timeout, f.ns, "r", nil)
	f.h0 = cm.Annotations[v1alpha1.HashAnnotation]

	f.ro = &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "r"},
		Spec: v1alpha1.RouterRolloutSpec{Router: "r", Steps: steps, Analysis: v1alpha1.RolloutAnalysis{
			Interval: &metav1.Duration{Duration: time.Second}, Count: &count,
		}},
	}
	testenv.Create(t, k8s, f.ro)
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Ready", testenv.Want{Status: metav1.ConditionTrue, Reason: "Idle", MessageContains: "on 2 of 2 pods"})
	if f.ro.Status.StableHash != f.h0 {
		t.Fatalf("stableHash %q, the ConfigMap holds %q", f.ro.Status.StableHash, f.h0)
	}
	return f
}

// change gives the decode role another config and returns its hash, read
// from the ConfigMap that stages it.
func (f *rolloutFixture) change(t *testing.T, multiplier float64) string {
	t.Helper()
	update(t, f.role, func(rr *v1alpha1.RouterRole) {
		rr.Spec.WorkerSelection.Parameters = testenv.Params(map[string]any{"shared_cache_multiplier": multiplier})
	})
	var cand string
	testenv.WaitConfigMap(t, k8s, timeout, f.ns, "r", func(cm *corev1.ConfigMap) error {
		cand = cm.Annotations[compiled.CandidateHashAnnotation]
		if cand == "" {
			return fmt.Errorf("no candidate staged: %v", cm.Annotations)
		}
		return nil
	})
	return cand
}

func (f *rolloutFixture) waitPhase(t *testing.T, phase v1alpha1.RolloutPhase) {
	t.Helper()
	testenv.Eventually(t, timeout, "RouterRollout phase "+string(phase), func(ctx context.Context) error {
		if err := k8s.Get(ctx, keyOf(f.ro), f.ro); err != nil {
			return err
		}
		if f.ro.Status.Phase != phase {
			return fmt.Errorf("phase %s, step %d, conditions %v", f.ro.Status.Phase, f.ro.Status.CurrentStep, f.ro.Status.Conditions)
		}
		return nil
	})
}

// waitStable waits until the ConfigMap holds hash as stable and stages
// nothing, and returns it.
func (f *rolloutFixture) waitStable(t *testing.T, hash string) *corev1.ConfigMap {
	t.Helper()
	return testenv.WaitConfigMap(t, k8s, timeout, f.ns, "r", func(cm *corev1.ConfigMap) error {
		if got := cm.Annotations[v1alpha1.HashAnnotation]; got != hash {
			return fmt.Errorf("stable %s, want %s", got, hash)
		}
		for k := range cm.Data {
			if strings.HasPrefix(k, compiled.CandidatePrefix) || k == compiled.StageKey {
				return fmt.Errorf("still stages a candidate (key %s)", k)
			}
		}
		if _, ok := cm.Annotations[compiled.CandidateHashAnnotation]; ok {
			return fmt.Errorf("still names a candidate")
		}
		return nil
	})
}

func shadowStep() v1alpha1.RolloutStep { return v1alpha1.RolloutStep{Shadow: &v1alpha1.ShadowStep{}} }
func canaryStep(w int32) v1alpha1.RolloutStep {
	return v1alpha1.RolloutStep{Canary: &v1alpha1.CanaryStep{Weight: w}}
}

func TestRolloutStagesShadowThenPromotes(t *testing.T) {
	j := newJudge()
	withRolloutManager(t, j)
	f := newRolloutFixture(t, 1, shadowStep(), canaryStep(10), canaryStep(50))
	before := get(t, f.ns, "r-hints", &corev1.ConfigMap{})
	// Hold the candidate at its first step to look at it there.
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = true })
	h := f.change(t, 0.3)

	// Staged as shadow; the stable config untouched.
	cm := get(t, f.ns, "r-hints", &corev1.ConfigMap{})
	split, err := compiled.Split(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	if split.Stage.Stage != rolloutapi.StageShadow || cm.Annotations[v1alpha1.HashAnnotation] != f.h0 {
		t.Fatalf("staged %+v, stable %s (want %s)", split.Stage, cm.Annotations[v1alpha1.HashAnnotation], f.h0)
	}
	for _, k := range []string{compiled.PolicyKey, compiled.RolesKey} {
		if cm.Data[k] != before.Data[k] {
			t.Errorf("stable key %s changed:\n%s\nwas\n%s", k, cm.Data[k], before.Data[k])
		}
	}
	// The candidate's compiled config is kept, immutable, owned by the
	// rollout.
	kept := get(t, f.ns, "r-hints-"+h, &corev1.ConfigMap{})
	if kept.Immutable == nil || !*kept.Immutable || compiled.Hash(kept.Data) != h || len(kept.OwnerReferences) != 1 || kept.OwnerReferences[0].Kind != "RouterRollout" {
		t.Fatalf("candidate ConfigMap: immutable %v, hash %s, owners %v", kept.Immutable, compiled.Hash(kept.Data), kept.OwnerReferences)
	}
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Paused", testenv.Want{Status: metav1.ConditionTrue, Reason: "Paused", MessageContains: "step 1/3 (shadow): 2 of 2 pods on candidate " + h})
	waitRolloutGitops(t, f.ro, status.InProgressStatus, "Suspended", "Paused: step 1/3 (shadow)")
	if n := j.count(rolloutapi.Stage{Candidate: h, Stage: rolloutapi.StageShadow}); n != 0 {
		t.Errorf("%d measurements while paused", n)
	}
	// The role's spec does not run everywhere yet: it is staged, and
	// kstatus reads the role as InProgress.
	testenv.WaitCondition(t, k8s, timeout, f.role, "Programmed", testenv.Want{Status: metav1.ConditionFalse, Reason: "Staged",
		MessageContains: "config " + h + " is staged by RouterRollout r, step 1/3 (shadow), paused", Generation: testenv.AnyGeneration})
	testenv.WaitCondition(t, k8s, timeout, f.role, "Reconciling", testenv.Want{Status: metav1.ConditionTrue, Reason: "Staged"})

	start := time.Now()
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = false })
	f.waitPhase(t, v1alpha1.RolloutPromoted)
	t.Logf("promoted through 3 steps (1 measurement each, interval 1s) in %v", time.Since(start).Round(time.Millisecond))
	f.waitStable(t, h)
	for _, st := range []rolloutapi.Stage{
		{Candidate: h, Stage: rolloutapi.StageShadow},
		{Candidate: h, Stage: rolloutapi.StageCanary, Weight: 10},
		{Candidate: h, Stage: rolloutapi.StageCanary, Weight: 50},
	} {
		if n := j.count(st); n != 1 {
			t.Errorf("stage %s: %d measurements, want 1", stageKey(st), n)
		}
	}
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Ready", testenv.Want{Status: metav1.ConditionTrue, Reason: "Promoted"})
	waitRolloutGitops(t, f.ro, status.CurrentStatus, "Healthy", "stable config "+h)
	testenv.WaitCondition(t, k8s, timeout, f.role, "Ready", testenv.Want{Status: metav1.ConditionTrue})
}

func TestRolloutFailedRollsBack(t *testing.T) {
	j := newJudge()
	withRolloutManager(t, j)
	f := newRolloutFixture(t, 1, shadowStep(), canaryStep(10))
	stable := get(t, f.ns, "r-hints", &corev1.ConfigMap{})
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = true })
	h := f.change(t, 0.25)
	j.set(rolloutapi.Stage{Candidate: h, Stage: rolloutapi.StageCanary, Weight: 10}, rollout.Result{
		Verdict: v1alpha1.VerdictFailed, Reason: "PrefixHitDrop", Metric: "prefixHitRatio", Baseline: "0.612", Canary: "0.437",
		PValue: "0.00012", Samples: &v1alpha1.SampleCounts{Baseline: 4520, Canary: 498}, Message: "prefix-hit ratio fell by 0.175, over 0.02",
	})
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = false })

	f.waitPhase(t, v1alpha1.RolloutRolledBack)
	rb := f.ro.Status.LastRollback
	if rb == nil || rb.Hash != h || rb.Step != 1 || rb.Reason != "PrefixHitDrop" || rb.Metric != "prefixHitRatio" ||
		rb.Baseline != "0.612" || rb.Canary != "0.437" || rb.Samples == nil || rb.Samples.Canary != 498 || rb.ConfigMap != "r-hints-"+h {
		t.Fatalf("lastRollback: %+v", rb)
	}
	// The candidate's keys are gone, the stable config as it was.
	cm := f.waitStable(t, f.h0)
	for _, k := range []string{compiled.PolicyKey, compiled.RolesKey} {
		if cm.Data[k] != stable.Data[k] {
			t.Errorf("stable key %s changed", k)
		}
	}
	// The role whose spec produced the candidate says so; kstatus reads
	// both objects as Failed.
	c := testenv.WaitCondition(t, k8s, timeout, f.role, "Programmed", testenv.Want{Status: metav1.ConditionFalse, Reason: "RolledBack", Generation: testenv.AnyGeneration})
	if !strings.Contains(c.Message, "prefixHitRatio baseline 0.612, canary 0.437") {
		t.Errorf("Programmed message: %s", c.Message)
	}
	testenv.WaitCondition(t, k8s, timeout, f.role, "Ready", testenv.Want{Status: metav1.ConditionFalse, Reason: "RolledBack"})
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Stalled", testenv.Want{Status: metav1.ConditionTrue, Reason: "PrefixHitDrop"})
	waitRolloutGitops(t, f.ro, status.FailedStatus, "Degraded", "PrefixHitDrop: candidate "+h+" rolled back at step 2")
	// The candidate is kept for inspection.
	get(t, f.ns, "r-hints-"+h, &corev1.ConfigMap{})
	waitEvent(t, f.ns, f.ro.Name, "PrefixHitDrop", "samples 4520/498")
	// Nothing stages it again while the spec stays, and the role's
	// status, computed again, is not written again.
	rv := get(t, f.ns, f.role.Name, &v1alpha1.RouterRole{}).ResourceVersion
	time.Sleep(2 * time.Second) // a reconcile or two, to see that none stages it
	f.waitStable(t, f.h0)
	if now := get(t, f.ns, f.role.Name, &v1alpha1.RouterRole{}).ResourceVersion; now != rv {
		t.Errorf("the rolled-back role's status was written again (resourceVersion %s -> %s)", rv, now)
	}
}

// Two RouterRollouts for one router: the older runs, the other says so.
func TestRolloutConflict(t *testing.T) {
	withRolloutManager(t, newJudge())
	f := newRolloutFixture(t, 1, shadowStep())
	second := &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "r-again"},
		Spec:       v1alpha1.RouterRolloutSpec{Router: "r", Steps: []v1alpha1.RolloutStep{shadowStep()}},
	}
	testenv.Create(t, k8s, second)
	testenv.WaitCondition(t, k8s, timeout, second, "Stalled", testenv.Want{Status: metav1.ConditionTrue, Reason: "RolloutConflict", MessageContains: "RouterRollout r, older"})
	waitRolloutGitops(t, second, status.FailedStatus, "Degraded", "RolloutConflict: ")
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Ready", testenv.Want{Status: metav1.ConditionTrue, Reason: "Idle"})
}

func waitEvent(t *testing.T, ns, name, reason, contains string) {
	t.Helper()
	testenv.Eventually(t, timeout, "event "+reason+" on "+name, func(ctx context.Context) error {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, contains) {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Note)
		}
		return fmt.Errorf("events: %v", seen)
	})
}

func TestRolloutInconclusivePausesAndResumes(t *testing.T) {
	j := newJudge()
	withRolloutManager(t, j)
	f := newRolloutFixture(t, 1, shadowStep())
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = true })
	h := f.change(t, 0.7)
	shadow := rolloutapi.Stage{Candidate: h, Stage: rolloutapi.StageShadow}
	j.set(shadow, rollout.Result{Verdict: v1alpha1.VerdictInconclusive, Reason: "TooFewSamples", Message: "0 and 0 samples, fewer than 100"})
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = false })

	testenv.WaitCondition(t, k8s, timeout, f.ro, "Paused", testenv.Want{Status: metav1.ConditionTrue, Reason: "Inconclusive", MessageContains: "fewer than 100"})
	waitRolloutGitops(t, f.ro, status.InProgressStatus, "Suspended", "Inconclusive: ")
	// Neither promoted nor rolled back, and no measurement while paused.
	time.Sleep(2500 * time.Millisecond) // over two intervals
	if n := j.count(shadow); n != 1 {
		t.Fatalf("%d measurements, want 1 (paused)", n)
	}
	cm := get(t, f.ns, "r-hints", &corev1.ConfigMap{})
	if cm.Annotations[v1alpha1.HashAnnotation] != f.h0 || cm.Annotations[compiled.CandidateHashAnnotation] != h {
		t.Fatalf("paused: stable %s candidate %s", cm.Annotations[v1alpha1.HashAnnotation], cm.Annotations[compiled.CandidateHashAnnotation])
	}
	// The resume annotation, naming the candidate, goes on; the next
	// measurement is Successful and promotes.
	j.set(shadow, rollout.Result{Verdict: v1alpha1.VerdictSuccessful})
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) {
		ro.Annotations = map[string]string{v1alpha1.ResumeAnnotation: h}
	})
	f.waitPhase(t, v1alpha1.RolloutPromoted)
	testenv.Eventually(t, timeout, "the resume annotation removed", func(ctx context.Context) error {
		if err := k8s.Get(ctx, keyOf(f.ro), f.ro); err != nil {
			return err
		}
		if v, ok := f.ro.Annotations[v1alpha1.ResumeAnnotation]; ok {
			return fmt.Errorf("%s: %s", v1alpha1.ResumeAnnotation, v)
		}
		return nil
	})
	f.waitStable(t, h)
}

func TestRolloutManualPromoteAndAbort(t *testing.T) {
	j := newJudge()
	withRolloutManager(t, j)
	f := newRolloutFixture(t, 1, shadowStep(), canaryStep(10))
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = true })

	h1 := f.change(t, 0.3)
	// An annotation naming another hash does nothing.
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) {
		ro.Annotations = map[string]string{v1alpha1.PromoteAnnotation: "0123456789abcdef"}
	})
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Paused", testenv.Want{Status: metav1.ConditionTrue, Reason: "Paused", MessageContains: h1})
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) {
		ro.Annotations = map[string]string{v1alpha1.PromoteAnnotation: h1}
	})
	testenv.WaitCondition(t, k8s, timeout, f.ro, "Promoted", testenv.Want{Status: metav1.ConditionTrue, Reason: "ManualPromote"})
	f.waitStable(t, h1)

	h2 := f.change(t, 0.25)
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) {
		ro.Annotations = map[string]string{v1alpha1.AbortAnnotation: h2}
	})
	testenv.WaitCondition(t, k8s, timeout, f.ro, "RolledBack", testenv.Want{Status: metav1.ConditionTrue, Reason: "Aborted"})
	f.waitStable(t, h1)
	if n := j.count(rolloutapi.Stage{Candidate: h2, Stage: rolloutapi.StageShadow}); n != 0 {
		t.Errorf("%d measurements of an aborted candidate held paused", n)
	}
	testenv.WaitCondition(t, k8s, timeout, f.role, "Programmed", testenv.Want{Status: metav1.ConditionFalse, Reason: "RolledBack", Generation: testenv.AnyGeneration})
}

func TestRolloutNACKFailsShadow(t *testing.T) {
	j := newJudge()
	withRolloutManager(t, j)
	f := newRolloutFixture(t, 1, shadowStep(), canaryStep(10))
	f.cars.refuseCandidate("r-1", "role decode: worker selection kvcr: parameter shared_cache_multiplier: out of range")
	h := f.change(t, 0.3)
	f.waitPhase(t, v1alpha1.RolloutRolledBack)
	rb := f.ro.Status.LastRollback
	if rb.Hash != h || rb.Step != 0 || rb.Reason != "CandidateRefused" || !strings.Contains(rb.Message, "pod r-1 refused candidate "+h+": role decode") {
		t.Fatalf("lastRollback: %+v", rb)
	}
	f.waitStable(t, f.h0)
	if n := j.count(rolloutapi.Stage{Candidate: h, Stage: rolloutapi.StageCanary, Weight: 10}); n != 0 {
		t.Errorf("a refused candidate reached the canary step (%d measurements)", n)
	}
}

// A manager restarted mid-step resumes the step: the measurement it
// recorded is not taken again, the next one is taken, and the candidate
// is staged once.
func TestRolloutResumesAfterManagerRestart(t *testing.T) {
	j := newJudge()
	restart := withRolloutManager(t, j)
	f := newRolloutFixture(t, 3, shadowStep(), canaryStep(20))
	canary := rolloutapi.Stage{Candidate: "", Stage: rolloutapi.StageCanary, Weight: 20}
	h := f.change(t, 0.3)
	canary.Candidate = h
	testenv.Eventually(t, timeout, "the first canary measurement", func(ctx context.Context) error {
		if err := k8s.Get(ctx, keyOf(f.ro), f.ro); err != nil {
			return err
		}
		if f.ro.Status.CurrentStep != 1 || len(f.ro.Status.Measurements) != 1 {
			return fmt.Errorf("step %d, %d measurements", f.ro.Status.CurrentStep, len(f.ro.Status.Measurements))
		}
		return nil
	})
	started := f.ro.Status.StepStartedAt.Time
	first := f.ro.Status.Measurements[0].At.Time
	restart()
	f.waitPhase(t, v1alpha1.RolloutPromoted)
	if n := j.count(canary); n != 3 {
		t.Errorf("canary step: %d measurements across the restart, want 3 (none redone, none skipped)", n)
	}
	var evs eventsv1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	staged := 0
	for _, e := range evs.Items {
		if e.Regarding.Name == f.ro.Name && e.Action == "Stage" {
			staged++
		}
	}
	if staged != 1 {
		t.Errorf("candidate staged %d times, want 1", staged)
	}
	t.Logf("canary step started %s, first measurement %s, restart after it; promoted", started.Format(time.RFC3339Nano), first.Format(time.RFC3339Nano))
}

// waitRolloutGitops waits until kstatus (Flux, kpt) and Argo CD's health
// check (config/argocd/health-routerrollout.lua, run as Argo CD runs it)
// read the RouterRollout, as the API server serves it, as want says.
func waitRolloutGitops(t *testing.T, ro *v1alpha1.RouterRollout, kstatus status.Status, argo, argoMessage string) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("RouterRollout %s: kstatus %s, Argo CD %s", ro.Name, kstatus, argo), func(ctx context.Context) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("RouterRollout"))
		if err := k8s.Get(ctx, keyOf(ro), u); err != nil {
			return err
		}
		res, err := status.Compute(u)
		if err != nil {
			return err
		}
		health, msg, err := argocd.Health("../config/argocd", u)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != kstatus || health != argo || !strings.Contains(msg, argoMessage) {
			return fmt.Errorf("kstatus %s (%s), Argo CD %s (%s)", res.Status, res.Message, health, msg)
		}
		return nil
	})
}

// Candidates' ConfigMaps are kept for inspection, the last three and
// those still needed, and the older ones deleted.
func TestRolloutKeepsRecentCandidates(t *testing.T) {
	withRolloutManager(t, newJudge())
	f := newRolloutFixture(t, 1, shadowStep())
	update(t, f.ro, func(ro *v1alpha1.RouterRollout) { ro.Spec.Paused = true })
	var hashes []string
	for _, m := range []float64{0.1, 0.2, 0.3, 0.4, 0.6} {
		h := f.change(t, m)
		update(t, f.ro, func(ro *v1alpha1.RouterRollout) {
			ro.Annotations = map[string]string{v1alpha1.PromoteAnnotation: h}
		})
		f.waitStable(t, h)
		hashes = append(hashes, h)
		time.Sleep(1100 * time.Millisecond) // creation times a second apart, as the API server records them
	}
	testenv.Eventually(t, timeout, "old candidate ConfigMaps deleted", func(ctx context.Context) error {
		var list corev1.ConfigMapList
		if err := k8s.List(ctx, &list, client.InNamespace(f.ns), client.HasLabels{v1alpha1.ConfigHashLabel}); err != nil {
			return err
		}
		kept := map[string]bool{}
		for _, cm := range list.Items {
			kept[cm.Labels[v1alpha1.ConfigHashLabel]] = true
		}
		for i, h := range hashes {
			if want := i >= len(hashes)-4; kept[h] != want {
				return fmt.Errorf("candidate %d (%s) kept %v, want %v; kept %v", i, h, kept[h], want, kept)
			}
		}
		return nil
	})
}
