package rollout

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
)

// stagedRouter starts a 3-replica restart-mode router on its first config
// (taken at once: nothing to compare it with) and a RouterRollout whose
// first step pauses for pause; it returns the role, the Deployment as the
// manager left it, the first revision and the rollout.
func stagedRouter(t *testing.T, ns string, pause time.Duration, deadline int32) (*v1alpha1.RouterRole, *appsv1.Deployment, string, *v1alpha1.RouterRollout) {
	t.Helper()
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 3)
	dep.Spec.ProgressDeadlineSeconds = ptrTo(deadline)
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

// stepOne is what the first step looks like from outside.
type stepOne struct {
	routerPaused   bool
	routerTemplate corev1.PodTemplateSpec
	onCandidate    []string
	onStable       int
}

func observeStep(ctx context.Context, ns, dep, first, cand string) (stepOne, error) {
	var s stepOne
	d := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: dep}, d); err != nil {
		return s, err
	}
	s.routerPaused, s.routerTemplate = d.Spec.Paused, d.Spec.Template
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
			s.onStable++
		}
	}
	return s, nil
}

// TestRestartModeOnePodThenTheRest: a restart-mode Deployment under a
// RouterRollout. Planted: a valid change of the role's TTL. Judged: the
// candidate pod Ready for the first step's 4s pause (the sidecar provider
// cannot measure a Dynamo Frontend). During that step the router's
// Deployment stays paused and its template unchanged, exactly one pod
// runs the candidate revision and the three others the stable one; then
// promotion rolls the rest and the candidate Deployment goes.
func TestRestartModeOnePodThenTheRest(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first, ro := stagedRouter(t, ns, 4*time.Second, 600)
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
			if !s.routerPaused && len(s.onCandidate) > 0 {
				t.Errorf("a candidate pod runs while the router's Deployment is not paused")
			}
			if !reflect.DeepEqual(s.routerTemplate, dep.Spec.Template) {
				t.Fatalf("the router's pod template changed during the first step: mounts %s", policyConfigMap(&s.routerTemplate.Spec))
			}
			if len(s.onCandidate) > 1 {
				t.Fatalf("%d pods run the candidate in the first step: %v", len(s.onCandidate), s.onCandidate)
			}
			if len(s.onCandidate) == 1 {
				if s.onStable != 3 {
					t.Fatalf("%d pods on the stable revision beside the candidate's; want 3", s.onStable)
				}
				seenOne = true
			}
			return fmt.Errorf("step 1: %d on candidate, %d on stable", len(s.onCandidate), s.onStable)
		}
		return nil
	})
	if !seenOne {
		t.Fatal("never saw exactly one pod on the candidate in the first step")
	}
	testenv.WaitCondition(t, k8s, timeout, ro, string(v1alpha1.ConditionPromoted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonPromoted), MessageContains: "on 3 of 3 pods"})
	if ro.Status.StableHash != h || ro.Status.Pods == nil || ro.Status.Pods.Summary != "3/3" {
		t.Errorf("promoted: stableHash %q (want %s), pods %+v", ro.Status.StableHash, h, ro.Status.Pods)
	}
	requirePodsOn(t, ns, 3, second)
	requireNoCandidate(t, ns, dep)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run "+h, 0)
	requireOnlyVolumeWritten(t, dep)
}

// requireNoCandidate checks the candidate Deployment is gone and the
// router's Deployment unpaused.
func requireNoCandidate(t *testing.T, ns string, dep *appsv1.Deployment) {
	t.Helper()
	testenv.Eventually(t, timeout, "the candidate Deployment gone, the router's unpaused", func(ctx context.Context) error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: workload.CandidateName(dep.Name)}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("candidate Deployment: %v", err)
		}
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return err
		}
		if d.Spec.Paused {
			return fmt.Errorf("the router's Deployment is still paused")
		}
		return nil
	})
}

// TestRestartModeRollback: planted, in turn, an abort annotation naming
// the candidate while its one pod runs, then a candidate whose pod can
// never be created (a ResourceQuota of three pods: never Ready within the
// Deployment's 5s progress deadline). Each rolls the one pod back: the
// candidate Deployment goes, the router's Deployment is unpaused with the
// template it had, and every pod runs the stable revision.
func TestRestartModeRollback(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first, ro := stagedRouter(t, ns, time.Hour, 5)
	setTTL(t, rr, retain(120))
	h := candidateOf(t, ro)
	second := v1alpha1.RevisionConfigMapName("llama", h)
	testenv.Eventually(t, timeout, "one pod on the candidate", func(ctx context.Context) error {
		s, err := observeStep(ctx, ns, dep.Name, first, second)
		if err != nil {
			return err
		}
		if len(s.onCandidate) != 1 || s.onStable != 3 || !s.routerPaused {
			return fmt.Errorf("%d on candidate, %d on stable, router paused %v", len(s.onCandidate), s.onStable, s.routerPaused)
		}
		return nil
	})
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
	requireNoCandidate(t, ns, dep)
	requirePodsOn(t, ns, 3, first)
	requireTemplate(t, dep)

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
	requireNoCandidate(t, ns, dep)
	requirePodsOn(t, ns, 3, first)
	requireTemplate(t, dep)
}

// requireTemplate checks the router's pod template is the one dep has.
func requireTemplate(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), d); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Spec.Template, dep.Spec.Template) {
		t.Errorf("the router's pod template changed: mounts %s, was %s", policyConfigMap(&d.Spec.Template.Spec), policyConfigMap(&dep.Spec.Template.Spec))
	}
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
// while its candidate runs on one pod. The candidate Deployment goes, the
// router's Deployment is unpaused, and the change then reaches every pod
// as without a rollout.
func TestRestartModeRolloutDeletedMidStep(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first, ro := stagedRouter(t, ns, time.Hour, 600)
	setTTL(t, rr, retain(120))
	second := v1alpha1.RevisionConfigMapName("llama", candidateOf(t, ro))
	testenv.Eventually(t, timeout, "one pod on the candidate", func(ctx context.Context) error {
		s, err := observeStep(ctx, ns, dep.Name, first, second)
		if err != nil {
			return err
		}
		if len(s.onCandidate) != 1 || !s.routerPaused {
			return fmt.Errorf("%d on candidate, router paused %v", len(s.onCandidate), s.routerPaused)
		}
		return nil
	})
	if err := k8s.Delete(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	requireNoCandidate(t, ns, dep)
	requirePodsOn(t, ns, 3, second)
}
