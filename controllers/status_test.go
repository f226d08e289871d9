package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/gitopsview"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestProgrammedCountsRouterPods runs three router pods through their
// reports: Programmed counts those that run the current hash, ignores pods
// of other routers and pods being deleted, and turns True at 3/3.
func TestProgrammedCountsRouterPods(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "count", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "count", nil)
	hash := cm.Annotations[v1alpha1.HashAnnotation]

	c := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNoRouterPods), Generation: testenv.AnyGeneration})
	if want := fmt.Sprintf("ConfigMap count-hints holds config %s, but no router pods (label hints.kvrouter.io/router=count) run it yet", hash); c.Message != want {
		t.Errorf("Programmed message %q; want %q", c.Message, want)
	}

	var pods []*corev1.Pod
	for i := range 3 {
		pods = append(pods, testenv.CreateRouterPod(t, k8s, ns, "count", fmt.Sprintf("count-router-%d", i), ""))
	}
	testenv.CreateRouterPod(t, k8s, ns, "elsewhere", "elsewhere-router-0", hash)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/3 router pods run " + hash, Generation: testenv.AnyGeneration})

	testenv.ReportHash(t, k8s, pods[0], "0123456789abcdef") // an older config
	testenv.ReportHash(t, k8s, pods[1], hash)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "1/3 router pods run " + hash, Generation: testenv.AnyGeneration})
	testenv.ReportHash(t, k8s, pods[0], hash)
	testenv.ReportHash(t, k8s, pods[2], hash)
	c = testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), MessageContains: "3/3 router pods run " + hash, Generation: testenv.AnyGeneration})
	if c.ObservedGeneration != rr.Generation {
		t.Errorf("Programmed observedGeneration %d; want %d", c.ObservedGeneration, rr.Generation)
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})
	if got := rr.Status.RouterPods; got == nil || *got != (v1alpha1.RouterPods{Hash: hash, Total: 3, UpToDate: 3, Summary: "3/3"}) {
		t.Errorf("routerPods %+v; want 3/3 at %s", got, hash)
	}

	// A pod that goes (unscheduled pods are deleted at once) leaves 2/2.
	if err := k8s.Delete(context.Background(), pods[2]); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), MessageContains: "2/2 router pods run " + hash, Generation: testenv.AnyGeneration})

	// A new config needs the pods to report it again.
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = []v1alpha1.HintItem{} })
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/2 router pods run", Generation: testenv.AnyGeneration})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending)})
}

// TestTerminatedPodsNotCounted: a router pod that failed (evicted, say)
// stays in the API with the hash it ran last; it is not a router pod that
// could run the config, so it does not hold Programmed back.
func TestTerminatedPodsNotCounted(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "evict", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	hash := testenv.WaitConfigMap(t, k8s, timeout, ns, "evict", nil).Annotations[v1alpha1.HashAnnotation]
	testenv.CreateRouterPod(t, k8s, ns, "evict", "evict-router-0", hash)
	old := testenv.CreateRouterPod(t, k8s, ns, "evict", "evict-router-1", "0123456789abcdef")
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "1/2 router pods", Generation: testenv.AnyGeneration})

	old.Status.Phase = corev1.PodFailed
	old.Status.Reason = "Evicted"
	if err := k8s.Status().Update(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), MessageContains: "1/1 router pods", Generation: testenv.AnyGeneration})
}

// TestProgrammedEventsForANewRole: a new role on a router that has pods
// waits for them quietly (no Pending event) and gets one Programmed event
// when they run its config.
func TestProgrammedEventsForANewRole(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	pod := testenv.CreateRouterPod(t, k8s, ns, "quiet", "quiet-router-0", "")
	rr := newRole(ns, "decode", "quiet", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/1 router pods run", Generation: testenv.AnyGeneration})
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "quiet", nil)
	testenv.ReportHash(t, k8s, pod, cm.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), Generation: testenv.AnyGeneration})
	testenv.Eventually(t, timeout, "one Programmed event", func(ctx context.Context) error {
		n, err := countEvents(ctx, ns, rr.Name, string(v1alpha1.ReasonProgrammed))
		if err == nil && n != 1 {
			err = fmt.Errorf("%d Programmed events", n)
		}
		return err
	})
	// Events go out in order through one recorder: the Pending one, had
	// it been recorded, would be in by now.
	if n, err := countEvents(context.Background(), ns, rr.Name, string(v1alpha1.ReasonPending)); err != nil || n != 0 {
		t.Errorf("%d Pending events (%v); want none for a new role waiting for its pods", n, err)
	}
}

// TestForgedAppliedHashIgnored is the manager's half of issue item 1: an
// applied-hash written on a router pod by anything but the sidecar's field
// manager (here kubectl annotate's) is not counted. A second router pod is
// created after the forgery, so by the time the manager counts two pods it
// has seen the forgery too: 0/2, where a counted forgery reads 1/2.
func TestForgedAppliedHashIgnored(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "forged", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	hash := testenv.WaitConfigMap(t, k8s, timeout, ns, "forged", nil).Annotations[v1alpha1.HashAnnotation]
	forged := testenv.CreateRouterPod(t, k8s, ns, "forged", "forged-router-0", "")
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/1 router pods run " + hash, Generation: testenv.AnyGeneration})

	testenv.AnnotateHash(t, k8s, forged, hash, "kubectl-annotate")
	honest := testenv.CreateRouterPod(t, k8s, ns, "forged", "forged-router-1", "")
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/2 router pods run " + hash, Generation: testenv.AnyGeneration})
	testenv.ReportHash(t, k8s, honest, hash)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "1/2 router pods run " + hash, Generation: testenv.AnyGeneration})

	// The forged pod's own sidecar reports. Reporting the value already
	// there would be a no-op patch that leaves the annotation kubectl's
	// (the pod stays uncounted until the next config: failing safe); a
	// report that changes the value makes it the sidecar's.
	testenv.ReportHash(t, k8s, forged, "0123456789abcdef")
	testenv.ReportHash(t, k8s, forged, hash)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), MessageContains: "2/2 router pods run " + hash, Generation: testenv.AnyGeneration})
}

// TestStatusWaitsForPodReports: a new role on a router whose pod reports
// the config at once (as its sidecar does, within milliseconds) gets one
// status write, Programmed True, not Pending first and True a moment
// later; a router whose pod never reports still gets Pending.
func TestStatusWaitsForPodReports(t *testing.T) {
	testenv.Get(t)
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	wc, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The sidecar's part: report each config the moment it is written.
	pod := testenv.CreateRouterPod(t, k8s, ns, "prompt", "prompt-router-0", "")
	cms, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer cms.Stop()
	reportLag := make(chan time.Duration, 1)
	go func() {
		for ev := range cms.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type == watch.Deleted || cm.Name != v1alpha1.HintsConfigMapName("prompt") {
				continue
			}
			seen := time.Now()
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
			patch := client.RawPatch("application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AppliedHashAnnotation+`":"`+cm.Annotations[v1alpha1.HashAnnotation]+`"}}}`))
			if err := k8s.Patch(ctx, p, patch, client.FieldOwner(v1alpha1.SidecarFieldManager)); err != nil {
				t.Errorf("reporting the hash: %v", err)
			}
			select {
			case reportLag <- time.Since(seen):
			default:
			}
		}
	}()

	// Every status the role is seen with, in order.
	roles, err := wc.Watch(ctx, &v1alpha1.RouterRoleList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer roles.Stop()
	rr := newRole(ns, "decode", "prompt", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	var programmed []string
	for done := false; !done; {
		select {
		case ev := <-roles.ResultChan():
			got, ok := ev.Object.(*v1alpha1.RouterRole)
			if !ok {
				continue
			}
			c := meta.FindStatusCondition(got.Status.Conditions, string(v1alpha1.ConditionProgrammed))
			if c == nil {
				continue
			}
			programmed = append(programmed, string(c.Status)+"/"+c.Reason)
			done = c.Status == metav1.ConditionTrue
		case <-ctx.Done():
			t.Fatalf("the role was not Programmed; its Programmed conditions so far: %v", programmed)
		}
	}
	lag := <-reportLag
	if lag > 250*time.Millisecond {
		// The pod's report came too late to tell the two behaviours apart
		// (a machine this loaded would see Pending first either way).
		t.Skipf("the stand-in sidecar took %s to report; Programmed went %v", lag, programmed)
	}
	if len(programmed) != 1 {
		t.Errorf("Programmed went %v; want one status write, True (the pod reported within %s)", programmed, lag)
	}

	// A pod that never reports: Pending, within the wait.
	testenv.CreateRouterPod(t, k8s, ns, "silent", "silent-router-0", "")
	silent := newRole(ns, "decode", "silent", "decode", "dynamo-default-cost-fn")
	silent.Name = "silent-decode"
	testenv.Create(t, k8s, silent)
	testenv.WaitCondition(t, k8s, timeout, silent, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/1", Generation: testenv.AnyGeneration})
}

// TestPolicyEjectedNamesThePolicy: a router pod's sidecar that reports a
// hint policy ejected (hints.kvrouter.io/ejected-policies) makes the
// RouterRole's PolicyEjected True, naming the policy, on how many pods and
// why; Ready stays True. The same annotation written by another field
// manager is ignored, and the condition goes once the sidecar clears it.
func TestPolicyEjectedNamesThePolicy(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "eject", "decode", "dynamo-default-cost-fn")
	rr.Spec.Hints = []v1alpha1.HintItem{testenv.NamedHint("audit", "kv-retain", map[string]any{"ttl_seconds": 600}), testenv.Hint("kv-evict", nil)}
	testenv.Create(t, k8s, rr)
	hash := testenv.WaitConfigMap(t, k8s, timeout, ns, "eject", nil).Annotations[v1alpha1.HashAnnotation]
	pods := []*corev1.Pod{testenv.CreateRouterPod(t, k8s, ns, "eject", "eject-router-0", hash), testenv.CreateRouterPod(t, k8s, ns, "eject", "eject-router-1", hash)}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})

	// Forged: not the sidecar's field manager. A later honest report on
	// the other pod shows the manager has seen the forgery by then.
	reportEjected(t, pods[1], "decode/audit=busy", "kubectl-annotate")
	reportEjected(t, pods[0], "decode/audit=overrun", v1alpha1.SidecarFieldManager)
	c := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionPolicyEjected),
		testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonPolicyEjected), MessageContains: "hint policy audit is ejected on 1/2 router pods (overrun)"})
	t.Logf("PolicyEjected: %s", c.Message)
	if r := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionReady)); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v while a policy is ejected; want True (the spec runs on every pod)", r)
	}
	v := gitopsview.Read(t, k8s, ns, rr.Name, "RouterRole")
	if v.KStatus != status.CurrentStatus || v.Argo != "Healthy" || !strings.Contains(v.ArgoMessage, "PolicyEjected: hint policy audit is ejected") {
		t.Errorf("GitOps view while a policy is ejected: %v; want kstatus Current, Argo CD Healthy naming the policy", v)
	}

	reportEjected(t, pods[1], "decode/audit=abandoned", v1alpha1.SidecarFieldManager)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionPolicyEjected),
		testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonPolicyEjected), MessageContains: "hint policy audit is ejected on 2/2 router pods (abandoned, overrun)"})

	for _, p := range pods {
		reportEjected(t, p, "", v1alpha1.SidecarFieldManager)
	}
	testenv.Eventually(t, timeout, "PolicyEjected gone", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionPolicyEjected)); c != nil {
			return fmt.Errorf("PolicyEjected still there: %s", c.Message)
		}
		return nil
	})
}

// reportEjected writes (or, for "", removes) the ejected-policies
// annotation as fieldManager.
func reportEjected(t *testing.T, pod *corev1.Pod, value, fieldManager string) {
	t.Helper()
	var body string
	if value == "" {
		body = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, v1alpha1.EjectedPoliciesAnnotation)
	} else {
		body = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.EjectedPoliciesAnnotation, value)
	}
	if err := k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", []byte(body)), client.FieldOwner(fieldManager)); err != nil {
		t.Fatalf("annotating pod %s: %v", pod.Name, err)
	}
}
