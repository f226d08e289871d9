package staged

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// The router whose config the tests stage, and its prefill role: kvcr
// commits KV copies (shared_cache_multiplier 0.5) and kv-fetch sends them,
// so a booked worker that did not serve the session's last turn fetches
// its blocks instead of computing them.
const (
	router  = "llama"
	prefill = "llama-prefill"
)

// trafficRate is the completion requests per second each front router
// sends (two llama router pods): with a prefill and a decode hop each,
// about 120 outcomes a second reach the sidecars, so each arm of a 50%
// canary has some 450 by a step's first measurement.
const trafficRate = 30

var (
	// withFetch is the prefill role as config/samples has it.
	withFetch = prefillSpec(0.5, testenv.Hint("kv-fetch", map[string]any{"min_blocks": 4}))
	// withoutFetch commits no copy and sends none: every block a worker
	// did not compute itself is computed again.
	withoutFetch = prefillSpec(0, []v1alpha1.HintItem{}...)
)

// prefillSpec is llama-prefill's workerSelection and hints.
func prefillSpec(multiplier float64, hints ...v1alpha1.HintItem) func(*v1alpha1.RouterRole) {
	return func(rr *v1alpha1.RouterRole) {
		rr.Spec.WorkerSelection.Parameters = testenv.Params(map[string]any{"shared_cache_multiplier": multiplier, "overlap_score_credit": 1})
		rr.Spec.Hints = append([]v1alpha1.HintItem{}, hints...)
	}
}

// TestStagedRollout walks one router through the cases of a staged
// rollout, in order, each starting from the stable config the one before
// left.
func TestStagedRollout(t *testing.T) {
	requireEnv(t)
	waitRoleReady(t, prefill)
	stopTraffic := drive(t)
	defer stopTraffic()
	createRollout(t)

	t.Run("dropping kv-fetch is rolled back at a canary step", func(t *testing.T) {
		// Planted: the candidate stops fetching committed copies, so a
		// prefill worker that did not serve a session's last turn computes
		// its prompt again: fewer cached tokens per request. Judged by the
		// prefix-hit ratio of canary against baseline in the same pods.
		stable := stableHash(t)
		setPrefill(t, withoutFetch)
		cand := waitCandidate(t, stable)
		ro := waitPhase(t, 3*time.Minute, v1alpha1.RolloutRolledBack)
		rb := ro.Status.LastRollback
		if rb == nil || rb.Hash != cand {
			t.Fatalf("status.lastRollback = %+v, want candidate %s", rb, cand)
		}
		t.Logf("rolled back at step %d: %s (metric %s, baseline %s, canary %s, p %s, samples %+v)",
			rb.Step, rb.Reason, rb.Metric, rb.Baseline, rb.Canary, rb.PValue, rb.Samples)
		if rb.Metric == "" || rb.Samples == nil || rb.Samples.Canary == 0 {
			t.Errorf("the rollback does not say which metric judged it, and on how many samples: %+v", rb)
		}
		if rb.Step < 1 {
			t.Errorf("rolled back at step %d: the shadow step has no outcomes to judge; the first canary step is 1", rb.Step)
		}
		// No pod stays on it: the ConfigMap holds the stable config alone,
		// and every pod runs it with no candidate.
		assertStableEverywhere(t, stable)
		c := testenv.WaitCondition(t, env.Client, time.Minute, roleRef(prefill), string(v1alpha1.ConditionProgrammed),
			testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonRolledBack)})
		t.Logf("RouterRole %s: Programmed=False %s: %s", prefill, c.Reason, c.Message)
		// The decode role did not change: it runs as specified, in the
		// stable config, on every pod.
		waitRoleReady(t, "llama-decode")
		logRollouts(t)
		// Back to the stable spec: nothing to stage, the role is Ready.
		setPrefill(t, withFetch)
		waitRoleReady(t, prefill)
		if h := stableHash(t); h != stable {
			t.Fatalf("the spec of the stable config compiles to %s, not the stable hash %s", h, stable)
		}
	})

	t.Run("adding kv-fetch is promoted through every step", func(t *testing.T) {
		stable := restartFrom(t, withoutFetch)
		// Planted: the candidate fetches the committed copies, so cached
		// tokens per request rise. Judged by every measurement of every
		// step being Successful.
		start := time.Now()
		setPrefill(t, withFetch)
		cand := waitCandidate(t, stable)
		ro := waitPhase(t, 3*time.Minute, v1alpha1.RolloutPromoted)
		t.Logf("promoted %s through %d steps in %v after the change was applied", cand, len(ro.Spec.Steps), time.Since(start).Round(time.Second))
		if ro.Status.StableHash != cand {
			t.Fatalf("status.stableHash = %s, want the promoted candidate %s", ro.Status.StableHash, cand)
		}
		assertStableEverywhere(t, cand)
		waitRoleReady(t, prefill)
		logRollouts(t)
	})

	t.Run("a candidate the sidecars refuse never passes shadow", func(t *testing.T) {
		// Planted: kv-offload, which the manager's build links and the
		// sidecars' does not. Judged by the pods' config status: every
		// sidecar refuses the candidate (its NACK), so the shadow step
		// fails and no pod runs it.
		stable := stableHash(t)
		setPrefill(t, withFetch, func(rr *v1alpha1.RouterRole) {
			rr.Spec.Hints = append(rr.Spec.Hints, testenv.Hint("kv-offload", map[string]any{"tier": "cpu"}))
		})
		cand := waitCandidate(t, stable)
		ro := waitPhase(t, time.Minute, v1alpha1.RolloutRolledBack)
		rb := ro.Status.LastRollback
		if rb == nil || rb.Hash != cand || rb.Step != 0 || rb.Reason != string(v1alpha1.ReasonCandidateRefused) {
			t.Fatalf("lastRollback = %+v, want candidate %s refused at the shadow step (0)", rb, cand)
		}
		t.Logf("refused in shadow: %s", rb.Message)
		if !strings.Contains(rb.Message, "kv-offload") {
			t.Errorf("the rollback does not name what the sidecars refused: %s", rb.Message)
		}
		assertStableEverywhere(t, stable)
		setPrefill(t, withFetch)
		waitRoleReady(t, prefill)
	})

	t.Run("a manager killed mid-step resumes at that step", func(t *testing.T) {
		// The change of the promoted case again, with a long last step so
		// that the kill lands inside it.
		stable := restartFrom(t, withoutFetch)
		updateRollout(t, func(ro *v1alpha1.RouterRollout) {
			ro.Spec.Steps[len(ro.Spec.Steps)-1].Pause = &metav1.Duration{Duration: 25 * time.Second}
		})
		setPrefill(t, withFetch)
		cand := waitCandidate(t, stable)
		last := int32(len(rolloutNow(t).Spec.Steps) - 1)
		var before *v1alpha1.RouterRollout
		testenv.Eventually(t, 2*time.Minute, "a measurement recorded in the last step", func(context.Context) error {
			ro := rolloutNow(t)
			if ro.Status.CurrentStep != last || len(ro.Status.Measurements) == 0 {
				return fmt.Errorf("step %d, %d measurements", ro.Status.CurrentStep, len(ro.Status.Measurements))
			}
			before = ro
			return nil
		})
		env.Manager.Kill()
		if err := env.StartManager(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Until the step moves on, the status the restarted manager writes
		// keeps the measurements recorded before the kill, first to last,
		// and the step's start: none is taken again, none skipped.
		testenv.Eventually(t, time.Minute, "a measurement after the restart", func(context.Context) error {
			after := rolloutNow(t)
			if after.Status.CurrentStep != before.Status.CurrentStep {
				return nil // the step passed: checked below by the promotion
			}
			if !after.Status.StepStartedAt.Equal(before.Status.StepStartedAt) {
				t.Fatalf("the step restarted: started %v before the kill, %v after", before.Status.StepStartedAt, after.Status.StepStartedAt)
			}
			for i, m := range before.Status.Measurements {
				if i >= len(after.Status.Measurements) || !after.Status.Measurements[i].At.Equal(&m.At) {
					t.Fatalf("measurement %d of the step (at %v) is not kept after the restart: %+v", i, m.At, after.Status.Measurements)
				}
			}
			if len(after.Status.Measurements) == len(before.Status.Measurements) {
				return errors.New("no measurement since the restart yet")
			}
			return nil
		})
		t.Logf("resumed at step %d after %d measurements, the step started %v", before.Status.CurrentStep, len(before.Status.Measurements), before.Status.StepStartedAt.Format(time.RFC3339Nano))
		ro := waitPhase(t, 2*time.Minute, v1alpha1.RolloutPromoted)
		if ro.Status.StableHash != cand {
			t.Fatalf("stable %s, want the resumed candidate %s", ro.Status.StableHash, cand)
		}
		assertStableEverywhere(t, cand)
	})

	t.Run("without traffic a canary step is inconclusive and pauses", func(t *testing.T) {
		stopTraffic()
		stable := stableHash(t)
		setPrefill(t, withoutFetch)
		cand := waitCandidate(t, stable)
		ro := waitPhase(t, 2*time.Minute, v1alpha1.RolloutPaused)
		c := meta.FindStatusCondition(ro.Status.Conditions, string(v1alpha1.ConditionPaused))
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(v1alpha1.ReasonInconclusive) {
			t.Fatalf("Paused = %+v, want True Inconclusive", c)
		}
		t.Logf("paused at step %d: %s", ro.Status.CurrentStep, c.Message)
		if ro.Status.StableHash != stable || stableHash(t) != stable {
			t.Fatalf("the inconclusive candidate %s was promoted", cand)
		}
		// An abort naming the candidate rolls it back now.
		annotate(t, wellknown.AbortAnnotation, cand)
		ro = waitPhase(t, time.Minute, v1alpha1.RolloutRolledBack)
		if ro.Status.LastRollback == nil || ro.Status.LastRollback.Reason != string(v1alpha1.ReasonAborted) {
			t.Fatalf("lastRollback = %+v, want reason Aborted", ro.Status.LastRollback)
		}
		assertStableEverywhere(t, stable)
	})
}

// restartFrom makes spec the router's stable config: with no
// RouterRollout the change is written at once. It then creates the
// rollout again and returns the stable hash.
func restartFrom(t *testing.T, spec func(*v1alpha1.RouterRole)) string {
	t.Helper()
	deleteRollout(t)
	setPrefill(t, spec)
	waitRoleReady(t, prefill)
	stable := stableHash(t)
	createRollout(t)
	return stable
}

// drive sends completion requests through every front router until the
// returned stop is called (more than once is fine).
func drive(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	env.DriveRequests(ctx, trafficRate)
	return cancel
}

func roleRef(name string) *v1alpha1.RouterRole {
	return &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

func waitRoleReady(t *testing.T, name string) {
	t.Helper()
	testenv.WaitCondition(t, env.Client, 2*time.Minute, roleRef(name), string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue})
}

// prefillChanged is when setPrefill last changed the prefill role: a
// rollback recorded since is of the candidate that change made.
var prefillChanged time.Time

func setPrefill(t *testing.T, edits ...func(*v1alpha1.RouterRole)) {
	t.Helper()
	prefillChanged = time.Now()
	testenv.Update(t, env.Client, 30*time.Second, roleRef(prefill), func(rr *v1alpha1.RouterRole) {
		for _, e := range edits {
			e(rr)
		}
	})
}

// rollout is the test's RouterRollout: shadow, then 50% and 80% of
// sessions, each step measured twice, 8 s apart, on at least 20 sessions
// an arm: the analysis counts sessions (1 to 4 turns, each a prefill and
// a decode outcome), some 190 of them by a step's first measurement, so
// the 20% arm of the 80% step holds about 40. A session that moves to
// the candidate keeps, in the workers' caches, what its earlier turns
// fetched under the stable config, so a
// candidate's effect on the hit ratio grows over its first seconds: the
// first canary step books half the sessions, for the most samples of
// each arm.
func rollout() *v1alpha1.RouterRollout {
	interval := metav1.Duration{Duration: 8 * time.Second}
	count, failureLimit, minSamples := int32(2), int32(1), int32(20)
	return &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: router},
		Spec: v1alpha1.RouterRolloutSpec{
			Router: router,
			Steps: []v1alpha1.RolloutStep{
				{Shadow: &v1alpha1.ShadowStep{}},
				{Canary: &v1alpha1.CanaryStep{Weight: 50}},
				{Canary: &v1alpha1.CanaryStep{Weight: 80}},
			},
			Analysis: v1alpha1.RolloutAnalysis{Interval: &interval, Count: &count, FailureLimit: &failureLimit, MinSamples: &minSamples},
		},
	}
}

func createRollout(t *testing.T) {
	t.Helper()
	testenv.Create(t, env.Client, rollout())
	testenv.Eventually(t, time.Minute, "the RouterRollout observed", func(context.Context) error {
		if ro := rolloutNow(t); ro.Status.ObservedGeneration != ro.Generation {
			return fmt.Errorf("observedGeneration %d of %d", ro.Status.ObservedGeneration, ro.Generation)
		}
		return nil
	})
}

func deleteRollout(t *testing.T) {
	t.Helper()
	ro := &v1alpha1.RouterRollout{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: router}}
	if err := env.Client.Delete(context.Background(), ro); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the RouterRollout gone", func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(ro), ro)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
}

func updateRollout(t *testing.T, change func(*v1alpha1.RouterRollout)) {
	t.Helper()
	testenv.Update(t, env.Client, 30*time.Second, &v1alpha1.RouterRollout{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: router}}, change)
}

func annotate(t *testing.T, key, value string) {
	t.Helper()
	updateRollout(t, func(ro *v1alpha1.RouterRollout) { metav1.SetMetaDataAnnotation(&ro.ObjectMeta, key, value) })
}

func rolloutNow(t *testing.T) *v1alpha1.RouterRollout {
	t.Helper()
	ro := &v1alpha1.RouterRollout{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: router}, ro); err != nil {
		t.Fatal(err)
	}
	return ro
}

// waitCandidate waits for the rollout to take up a candidate other than
// stable and returns its hash.
func waitCandidate(t *testing.T, stable string) string {
	t.Helper()
	var cand string
	testenv.Eventually(t, time.Minute, "a candidate staged", func(context.Context) error {
		ro := rolloutNow(t)
		if rb := ro.Status.LastRollback; ro.Status.Phase == v1alpha1.RolloutRolledBack && rb != nil && rb.Hash != stable && !rb.At.Time.Before(prefillChanged) {
			// Staged and rolled back between two polls (a candidate the
			// sidecars refuse goes within a second).
			cand = rb.Hash
			return nil
		}
		if ro.Status.CandidateHash == "" || ro.Status.CandidateHash == stable {
			return fmt.Errorf("candidate %q, phase %s", ro.Status.CandidateHash, ro.Status.Phase)
		}
		cand = ro.Status.CandidateHash
		return nil
	})
	return cand
}

// waitPhase waits for the rollout's phase, failing at once on a final
// phase other than it. It logs every measurement as the status records
// it: the figures each step was judged on.
func waitPhase(t *testing.T, timeout time.Duration, want v1alpha1.RolloutPhase) *v1alpha1.RouterRollout {
	t.Helper()
	var (
		ro     *v1alpha1.RouterRollout
		logged = map[string]bool{}
	)
	err := testenv.Poll(timeout, func(context.Context) error {
		ro = rolloutNow(t)
		if step := fmt.Sprint(ro.Status.CandidateHash, "/", ro.Status.CurrentStep); ro.Status.Phase == v1alpha1.RolloutProgressing && !logged[step] {
			logged[step] = true
			logRollouts(t, "get", "rro", "-o", "wide")
		}
		for _, m := range ro.Status.Measurements {
			key := fmt.Sprint(ro.Status.CandidateHash, ro.Status.CurrentStep, m.At.UnixMicro())
			if !logged[key] {
				logged[key] = true
				t.Logf("step %d measurement: %s %s (metric %s: baseline %s, canary %s, p %s, samples %+v) %s",
					ro.Status.CurrentStep, m.Verdict, m.Reason, m.Metric, m.Baseline, m.Canary, m.PValue, m.Samples, m.Message)
			}
		}
		switch ph := ro.Status.Phase; {
		case ph == want:
			return nil
		case ph == v1alpha1.RolloutPromoted || ph == v1alpha1.RolloutRolledBack:
			return nil // ended otherwise: said below
		default:
			return fmt.Errorf("phase %s at step %d", ph, ro.Status.CurrentStep)
		}
	})
	if err != nil || ro.Status.Phase != want {
		logRollouts(t)
		js, _ := json.MarshalIndent(ro.Status, "", "  ")
		t.Fatalf("RouterRollout %s: want phase %s, have %s (%v)\nstatus: %s", router, want, ro.Status.Phase, err, js)
	}
	return ro
}

// stableHash is the hash of the stable config in router llama's compiled
// ConfigMap.
func stableHash(t *testing.T) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName(router)}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Annotations[compiled.HashAnnotation]
}

// assertStableEverywhere waits until the ConfigMap stages nothing and
// every llama router pod runs stable with no candidate.
func assertStableEverywhere(t *testing.T, stable string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "every router pod on "+stable+" alone", func(ctx context.Context) error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName(router)}, cm); err != nil {
			return err
		}
		if h := cm.Annotations[compiled.HashAnnotation]; h != stable {
			return fmt.Errorf("ConfigMap's stable config %s", h)
		}
		if _, ok := cm.Data[compiled.StageKey]; ok {
			return fmt.Errorf("ConfigMap still stages %s", cm.Data[compiled.StageKey])
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.RouterLabel: router}); err != nil {
			return err
		}
		if len(pods.Items) < 2 {
			return fmt.Errorf("%d router pods", len(pods.Items))
		}
		for _, p := range pods.Items {
			var st rolloutapi.ConfigStatus
			if err := json.Unmarshal([]byte(p.Annotations[rolloutapi.ConfigStatusAnnotation]), &st); err != nil {
				return fmt.Errorf("pod %s: %w", p.Name, err)
			}
			if st.Active != stable || st.Assigned != stable || st.Candidate != nil {
				return fmt.Errorf("pod %s reports %+v", p.Name, st)
			}
		}
		return nil
	})
}

// logRollouts logs what kubectl shows of the RouterRollouts and the
// RouterRoles of llama (the printer columns users read), or the output of
// the kubectl command args.
func logRollouts(t *testing.T, args ...string) {
	t.Helper()
	bin := filepath.Join(env.CP.Assets, "kubectl")
	cmds := [][]string{args}
	if len(args) == 0 {
		cmds = [][]string{{"get", "rro", "-o", "wide"}, {"get", "rr", "--field-selector", "spec.router=" + router}}
	}
	for _, args := range cmds {
		cmd := exec.Command(bin, append([]string{"--namespace", namespace}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.CP.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
}
