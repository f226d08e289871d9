package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// stagedRouter starts a 3-replica restart-mode router on its first config
// (taken at once: nothing to compare it with) and a RouterRollout whose
// first step pauses for pause; it returns the role, the Deployment as the
// manager left it, the first revision and the rollout. The Deployment's
// strategy is strategy, not the default, so that its release is seen to
// put the owner's back.
func stagedRouter(t *testing.T, ns string, pause time.Duration, deadline int32, strategy appsv1.DeploymentStrategy) (*v1alpha1.RouterRole, *appsv1.Deployment, string, *v1alpha1.RouterRollout) {
	t.Helper()
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 3)
	dep.Spec.ProgressDeadlineSeconds = ptrTo(deadline)
	dep.Spec.Strategy = strategy
	ro := &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama"},
		Spec: v1alpha1.RouterRolloutSpec{Router: "llama",
			Steps: []v1alpha1.RolloutStep{
				{Canary: &v1alpha1.CanaryStep{Weight: 10}, Pause: &metav1.Duration{Duration: pause}},
				{Canary: &v1alpha1.CanaryStep{Weight: 100}},
			},
			Analysis: v1alpha1.RolloutAnalysis{Interval: &metav1.Duration{Duration: time.Second}},
		},
	}
	testenv.Create(t, k8s, rr, dep, ro)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", rr.Generation)
	first := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 3, first)
	testenv.WaitCondition(t, k8s, timeout, ro, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonIdle)})
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	return rr, dep, first, ro
}

// surge2 is a rolling update of two surge pods and none unavailable: not
// the default, nor the hold's.
func surge2() appsv1.DeploymentStrategy {
	two, zero := intstr.FromInt32(2), intstr.FromInt32(0)
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &two, MaxUnavailable: &zero}}
}

// candidateOf waits until the rollout has picked up a candidate and
// returns its hash.
func candidateOf(t *testing.T, ro *v1alpha1.RouterRollout) string {
	t.Helper()
	testenv.Eventually(t, timeout, "a candidate picked up", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			return err
		}
		if ro.Status.CandidateHash == "" {
			return fmt.Errorf("no candidate; phase %s", ro.Status.Phase)
		}
		return nil
	})
	return ro.Status.CandidateHash
}

// stepOne is what the first step looks like from outside: the router
// Deployment (paused, its hold annotation, what its template mounts) and
// its live pods.
type stepOne struct {
	paused      bool
	held        string
	template    string
	onCandidate []string
	onStable    map[types.UID]bool
}

func observeStep(ctx context.Context, ns, dep, first, cand string) (stepOne, error) {
	s := stepOne{onStable: map[types.UID]bool{}}
	d := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: dep}, d); err != nil {
		return s, err
	}
	s.paused, s.held, s.template = d.Spec.Paused, d.Annotations[v1alpha1.HeldAnnotation], policyConfigMap(&d.Spec.Template.Spec)
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.RouterLabel: "llama"}); err != nil {
		return s, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		switch policyConfigMap(&p.Spec) {
		case cand:
			s.onCandidate = append(s.onCandidate, p.Name)
		case first:
			s.onStable[p.UID] = true
		}
	}
	return s, nil
}

// waitOnePod waits for the first step as it must look once it runs: the
// Deployment held (its annotation naming the stable hash) and paused, its
// template on the candidate, exactly one live pod on the candidate and
// the three stable pods, the same ones (uids) as before the step.
func waitOnePod(t *testing.T, ns string, dep *appsv1.Deployment, first, cand string, uids map[types.UID]bool) stepOne {
	t.Helper()
	var s stepOne
	stableHash := strings.TrimPrefix(first, "llama-hints-")
	testenv.Eventually(t, timeout, "one pod on the candidate, the Deployment held and paused", func(ctx context.Context) error {
		var err error
		if s, err = observeStep(ctx, ns, dep.Name, first, cand); err != nil {
			return err
		}
		if len(s.onCandidate) != 1 || !reflect.DeepEqual(s.onStable, uids) || !s.paused || s.template != cand || !strings.Contains(s.held, `"stable":"`+stableHash+`"`) {
			return fmt.Errorf("%d on candidate, %d on stable (same pods: %v), paused %v, template on %s, hold record %q",
				len(s.onCandidate), len(s.onStable), reflect.DeepEqual(s.onStable, uids), s.paused, s.template, s.held)
		}
		return nil
	})
	return s
}

// uidsOn returns the uids of the router's live pods.
func uidsOn(t *testing.T, ns string) map[types.UID]bool {
	t.Helper()
	out := map[types.UID]bool{}
	for _, p := range livePods(t, ns) {
		out[p.UID] = true
	}
	return out
}

// TestRestartModeOnePodThenTheRest: a restart-mode Deployment under a
// RouterRollout, its own strategy two surge pods. Planted: a valid change
// of the role's TTL. Judged: the candidate pod Ready for the first step's
// 4s pause (the sidecar provider cannot measure a Dynamo Frontend).
// During that step the Deployment is held (annotation, paused, template
// on the candidate) with exactly one pod on the candidate beside the
// three stable ones, never scaled down or replaced; then promotion rolls
// the rest and puts the owner's strategy and minReadySeconds back, the
// annotation gone and the Deployment unpaused. The manager never creates
// or deletes a Deployment.
func TestRestartModeOnePodThenTheRest(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first, ro := stagedRouter(t, ns, 4*time.Second, 600, surge2())
	before := writesSnapshot()
	uids := uidsOn(t, ns)
	setTTL(t, rr, retain(120))
	h := candidateOf(t, ro)
	second := v1alpha1.RevisionConfigMapName("llama", h)
	waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonStaged, "step 1/2 (one pod)", 0)

	// Watched until the rollout leaves the first step.
	seenOne := false
	testenv.Eventually(t, timeout, "the first step over", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			return err
		}
		inFirst := ro.Status.CandidateHash == h && ro.Status.CurrentStep == 0
		s, err := observeStep(ctx, ns, dep.Name, first, second)
		if err != nil {
			return err
		}
		if inFirst && ro.Status.Phase == v1alpha1.RolloutProgressing {
			if len(s.onCandidate) > 1 {
				t.Fatalf("%d pods run the candidate in the first step: %v", len(s.onCandidate), s.onCandidate)
			}
			if !reflect.DeepEqual(s.onStable, uids) {
				t.Fatalf("a stable pod was scaled down or replaced in the first step: %d stable pods, the same ones %v", len(s.onStable), reflect.DeepEqual(s.onStable, uids))
			}
			if len(s.onCandidate) == 1 && s.paused && s.held != "" && s.template == second {
				seenOne = true
			}
			return fmt.Errorf("step 1: %d on candidate, %d on stable, paused %v", len(s.onCandidate), len(s.onStable), s.paused)
		}
		return nil
	})
	if !seenOne {
		t.Fatal("never saw the first step held: paused, one pod on the candidate, the three stable pods")
	}
	testenv.WaitCondition(t, k8s, timeout, ro, string(v1alpha1.ConditionPromoted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonPromoted), MessageContains: "on 3 of 3 pods"})
	if ro.Status.StableHash != h || ro.Status.Pods == nil || ro.Status.Pods.Summary != "3/3" {
		t.Errorf("promoted: stableHash %q (want %s), pods %+v", ro.Status.StableHash, h, ro.Status.Pods)
	}
	requirePodsOn(t, ns, 3, second)
	requireReleased(t, dep, second)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run "+h, 0)
	requireOnlyRolloutWrites(t, dep, before)
}

// requireReleased checks the Deployment is no longer held: unpaused, the
// hold annotation gone, the owner's strategy and minReadySeconds as they
// were (dep), its template on rev.
func requireReleased(t *testing.T, dep *appsv1.Deployment, rev string) {
	t.Helper()
	testenv.Eventually(t, timeout, "the Deployment released", func(ctx context.Context) error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return err
		}
		_, held := d.Annotations[v1alpha1.HeldAnnotation]
		if d.Spec.Paused || held || !reflect.DeepEqual(d.Spec.Strategy, dep.Spec.Strategy) || d.Spec.MinReadySeconds != dep.Spec.MinReadySeconds || policyConfigMap(&d.Spec.Template.Spec) != rev {
			return fmt.Errorf("paused %v, annotation %v, strategy %+v (was %+v), minReadySeconds %d (was %d), template on %s (want %s)",
				d.Spec.Paused, held, d.Spec.Strategy, dep.Spec.Strategy, d.Spec.MinReadySeconds, dep.Spec.MinReadySeconds, policyConfigMap(&d.Spec.Template.Spec), rev)
		}
		return nil
	})
}

// requireOnlyRolloutWrites checks the manager wrote the Deployment only
// as a rollout may: its three entries by server-side apply, and by
// update nothing but spec.strategy, spec.minReadySeconds, spec.paused and
// the hold annotation; and that since before it created and deleted no
// Deployment.
func requireOnlyRolloutWrites(t *testing.T, dep *appsv1.Deployment, before map[string]int) {
	t.Helper()
	after := writesSnapshot()
	for _, k := range []string{"POST deployments", "DELETE deployments"} {
		if n := after[k] - before[k]; n != 0 {
			t.Errorf("the manager made %d %s requests", n, k)
		}
	}
	d := &appsv1.Deployment{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), d); err != nil {
		t.Fatal(err)
	}
	holdFields := map[string]bool{"f:strategy": true, "f:minReadySeconds": true, "f:paused": true}
	for _, mf := range d.ManagedFields {
		if !strings.HasPrefix(mf.Manager, "kvhint") || mf.Operation != metav1.ManagedFieldsOperationUpdate {
			continue
		}
		var fields map[string]map[string]json.RawMessage
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
			t.Fatal(err)
		}
		for top, sub := range fields {
			for k, v := range sub {
				ok := top == "f:spec" && holdFields[k] ||
					top == "f:metadata" && k == "f:annotations" && string(v) == `{"f:`+v1alpha1.HeldAnnotation+`":{}}`
				if !ok {
					t.Errorf("the manager updated %s.%s of the Deployment (%s)", top, k, mf.FieldsV1.GetRawString())
				}
			}
		}
	}
	for _, mf := range d.ManagedFields {
		if strings.HasPrefix(mf.Manager, "kvhint") && mf.Operation != metav1.ManagedFieldsOperationUpdate &&
			(mf.Manager != v1alpha1.RolloutFieldManager || mf.Subresource != "" || mf.FieldsV1.GetRawString() != threeEntries) {
			t.Errorf("the manager applies %s of the Deployment as %s; want only its three entries as %s", mf.FieldsV1.GetRawString(), mf.Manager, v1alpha1.RolloutFieldManager)
		}
	}
}

// TestRestartModeRollback: the owner's strategy Recreate. Planted, in
// turn, an abort annotation naming the candidate while its one pod runs,
// then a candidate whose pod can never be created (a ResourceQuota of
// three pods: never Ready within the Deployment's 5s progress deadline).
// Each rolls the one pod back: the template back on the stable revision,
// the owner's strategy and minReadySeconds back, the Deployment unpaused,
// no pod on the candidate, and the three stable pods the same ones
// throughout (never restarted or replaced).
func TestRestartModeRollback(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first, ro := stagedRouter(t, ns, time.Hour, 5, appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType})
	before := writesSnapshot()
	uids := uidsOn(t, ns)
	setTTL(t, rr, retain(120))
	h := candidateOf(t, ro)
	second := v1alpha1.RevisionConfigMapName("llama", h)
	waitOnePod(t, ns, dep, first, second, uids)
	testenv.Eventually(t, timeout, "the abort annotation", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			return err
		}
		if ro.Annotations == nil {
			ro.Annotations = map[string]string{}
		}
		ro.Annotations[v1alpha1.AbortAnnotation] = h
		return k8s.Update(ctx, ro)
	})
	c := testenv.WaitCondition(t, k8s, timeout, ro, string(v1alpha1.ConditionRolledBack), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAborted)})
	if !strings.Contains(c.Message, h) {
		t.Errorf("RolledBack says %q; want the candidate named", c.Message)
	}
	waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonRolledBack, "Aborted", 0)
	requireReleased(t, dep, first)
	requirePodsOn(t, ns, 3, first)
	if got := uidsOn(t, ns); !reflect.DeepEqual(got, uids) {
		t.Errorf("after the rollback the stable pods are not the ones before it: %d pods", len(got))
	}

	// Three pods at most: the next candidate's pod is never created.
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "three-pods"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}},
	}
	testenv.Create(t, k8s, quota)
	// No quota controller runs: the test reports the usage it would.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}}
	if err := k8s.Status().Update(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	setTTL(t, rr, retain(180))
	testenv.Eventually(t, timeout, "a second candidate", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			return err
		}
		if ro.Status.CandidateHash == "" || ro.Status.CandidateHash == h {
			return fmt.Errorf("candidate %q", ro.Status.CandidateHash)
		}
		return nil
	})
	third := ro.Status.CandidateHash
	c = testenv.WaitCondition(t, k8s, timeout, ro, string(v1alpha1.ConditionRolledBack), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonCandidateRefused)})
	if !strings.Contains(c.Message, third) || !strings.Contains(c.Message, "no candidate pod") || !strings.Contains(c.Message, "quota") {
		t.Errorf("RolledBack says %q; want the candidate, that no pod ran and the quota's refusal", c.Message)
	}
	requireReleased(t, dep, first)
	requirePodsOn(t, ns, 3, first)
	if got := uidsOn(t, ns); !reflect.DeepEqual(got, uids) {
		t.Errorf("after the second rollback the stable pods are not the ones before it: %d pods", len(got))
	}
	requireOnlyRolloutWrites(t, dep, before)
}

// TestGraphRouterIsNotStaged: a DGD router under a RouterRollout is not
// staged (Dynamo has no partition or pause of a component's pods): the
// rollout says so with Ready=True reason RestartModeRouter, picks up no
// candidate, and a change rolls every Frontend pod by Dynamo's own
// rolling update, as without a rollout.
func TestGraphRouterIsNotStaged(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, _, _ := programmedGraph(t, ns, 2)
	ro := &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama"},
		Spec:       v1alpha1.RouterRolloutSpec{Router: "llama", Steps: []v1alpha1.RolloutStep{{Canary: &v1alpha1.CanaryStep{Weight: 50}}}},
	}
	testenv.Create(t, k8s, ro)
	testenv.WaitCondition(t, k8s, timeout, ro, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue,
		Reason: string(v1alpha1.ReasonRestartModeRouter), MessageContains: "DynamoGraphDeployment"})
	gen := setTTL(t, rr, retain(120))
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", gen)
	requirePodsOn(t, ns, 2, v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr)))
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(ro), ro); err != nil {
		t.Fatal(err)
	}
	if ro.Status.CandidateHash != "" || ro.Status.Phase != v1alpha1.RolloutIdle {
		t.Errorf("a DGD router's change was staged: candidate %q, phase %s", ro.Status.CandidateHash, ro.Status.Phase)
	}
}

// TestRestartModeRolloutDeletedMidStep: planted, the RouterRollout deleted
// while its candidate runs on one pod. The hold is released (the owner's
// strategy back, unpaused, the annotation gone), and the change then
// reaches every pod as without a rollout.
func TestRestartModeRolloutDeletedMidStep(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first, ro := stagedRouter(t, ns, time.Hour, 600, surge2())
	before := writesSnapshot()
	uids := uidsOn(t, ns)
	setTTL(t, rr, retain(120))
	second := v1alpha1.RevisionConfigMapName("llama", candidateOf(t, ro))
	waitOnePod(t, ns, dep, first, second, uids)
	if err := k8s.Delete(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	requireReleased(t, dep, second)
	requirePodsOn(t, ns, 3, second)
	requireOnlyRolloutWrites(t, dep, before)
}
