package controllers_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar"
	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// realRouterPod runs a real sidecar (internal/sidecar, in this process)
// for router pod name of router r: it watches the router's ConfigMap,
// reports its config status on the pod through the API server, books on
// loopback and serves its outcomes on its ops port, which the pod
// declares as kvhint-ops with status.podIP 127.0.0.1, as a kubelet would
// report a pod on the host's network.
func realRouterPod(t *testing.T, kc kubernetes.Interface, ns, name string) *sidecar.Sidecar {
	t.Helper()
	// The sidecar first, on a port of its own choosing (a port found free
	// and bound later can be taken in between), then the pod that
	// declares it: the sidecar's reports wait for their pod.
	s, err := sidecar.New(sidecar.Options{
		Catalog: builtin.NewCatalog(), ConfigMap: v1alpha1.HintsConfigMapName("r"), Namespace: ns,
		PodName: name, PodNamespace: ns, Kube: kc,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: sidecartest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	_, port, err := net.SplitHostPort(s.OpsAddr())
	if err != nil {
		t.Fatal(err)
	}
	ops, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	pod := testenv.RouterPod(ns, name, "r")
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "kvhint-sidecar", Image: "kvhint:test",
		Ports: []corev1.ContainerPort{{Name: provider.OpsPortName, ContainerPort: int32(ops)}}})
	testenv.Create(t, k8s, pod)
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "127.0.0.1"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	if err := k8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return s
}

// realRollout is a router "r" with a decode role, two pods with real
// sidecars (internal/sidecar, in this process) and a RouterRollout of a
// shadow step and a 50% canary step, judged every second with at least
// 50 requests per config, under a manager that runs its own analysis
// (rollout.Judge: the sidecar provider over loopback, the statistics of
// internal/rollout/analysis); a router loop books on both pods and
// reports each request's outcome under the config hash the booking
// answer named: candCached of 1000 prompt tokens cached (± 25) when the
// candidate booked it, 600 when the stable config did. It changes the
// role and returns when the rollout is Promoted or RolledBack.
func realRollout(t *testing.T, candCached int) (ro *v1alpha1.RouterRollout, role *v1alpha1.RouterRole, h0, h string) {
	withRolloutManager(t, rollout.NewJudge(provider.SidecarOptions{AllowLoopback: true, Timeout: 5 * time.Second}, provider.PrometheusOptions{}))
	kc, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, k8s, "rollout-real")
	role = newRole(ns, "decode", "r", "decode", "kvcr")
	testenv.Create(t, k8s, role)
	cars := []*sidecar.Sidecar{realRouterPod(t, kc, ns, "r-0"), realRouterPod(t, kc, ns, "r-1")}
	h0 = testenv.WaitConfigMap(t, k8s, timeout, ns, "r", nil).Annotations[v1alpha1.HashAnnotation]

	minSamples, count := int32(50), int32(1)
	ro = &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"},
		Spec: v1alpha1.RouterRolloutSpec{Router: "r", Steps: []v1alpha1.RolloutStep{shadowStep(), canaryStep(50)},
			Analysis: v1alpha1.RolloutAnalysis{Interval: &metav1.Duration{Duration: time.Second}, Count: &count, MinSamples: &minSamples}},
	}
	testenv.Create(t, k8s, ro)
	testenv.WaitCondition(t, k8s, timeout, ro, "Ready", testenv.Want{Status: metav1.ConditionTrue, Reason: "Idle", MessageContains: "on 2 of 2 pods"})

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var booked, byCandidate atomic.Int64
	var cand atomic.Value
	cand.Store("")
	t.Cleanup(func() { stop(); wg.Wait() })
	for k, s := range cars {
		c, err := bookingapi.NewClient("http://"+s.BookingAddr(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				b := &bookingapi.Booking{RequestID: fmt.Sprintf("req-%d-%d", k, i), Role: "decode", Worker: "w-0",
					PromptTokens: 1000, BlockSize: 16, Session: hints.Session{ID: fmt.Sprintf("s-%d-%d", k, i%500), Turn: 1}}
				a, err := c.BookAnswer(ctx, b)
				if err != nil || a.ConfigHash == "" {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				cached := 600 + i%51 - 25
				if a.ConfigHash == cand.Load().(string) {
					cached = candCached + i%51 - 25
					byCandidate.Add(1)
				}
				booked.Add(1)
				_ = c.ReportOutcome(ctx, &bookingapi.Outcome{RequestID: b.RequestID, Role: "decode", Worker: "w-0",
					ConfigHash: a.ConfigHash, PromptTokens: 1000, CachedTokens: cached, TTFTSeconds: 0.1})
				time.Sleep(2 * time.Millisecond)
			}
		})
	}

	start := time.Now()
	update(t, role, func(rr *v1alpha1.RouterRole) {
		rr.Spec.WorkerSelection.Parameters = testenv.Params(map[string]any{"shared_cache_multiplier": 0.3})
	})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "r", func(cm *corev1.ConfigMap) error {
		if h = cm.Annotations[compiled.CandidateHashAnnotation]; h == "" {
			return fmt.Errorf("no candidate staged")
		}
		return nil
	})
	cand.Store(h)
	testenv.Eventually(t, 60*time.Second, "the rollout's end", func(ctx context.Context) error {
		if err := k8s.Get(ctx, keyOf(ro), ro); err != nil {
			return err
		}
		if ro.Status.Phase != v1alpha1.RolloutRolledBack && ro.Status.Phase != v1alpha1.RolloutPromoted {
			return fmt.Errorf("phase %s step %d: %v", ro.Status.Phase, ro.Status.CurrentStep, ro.Status.Conditions)
		}
		return nil
	})
	t.Logf("%s %v after the change (%d bookings, %d by the candidate)", ro.Status.Phase, time.Since(start).Round(time.Millisecond), booked.Load(), byCandidate.Load())
	return ro, role, h0, h
}

// waitPodsOn waits until every router pod's sidecar reports running
// stable and no candidate.
func waitPodsOn(t *testing.T, ns, stable string) {
	t.Helper()
	for _, name := range []string{"r-0", "r-1"} {
		testenv.Eventually(t, timeout, "pod "+name+" on "+stable+" alone", func(ctx context.Context) error {
			p := &corev1.Pod{}
			if err := k8s.Get(ctx, keyOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}), p); err != nil {
				return err
			}
			cs := rollout.ConfigStatusOf(p)
			if cs == nil || cs.Active != stable || cs.Candidate != nil {
				return fmt.Errorf("config status %+v", cs)
			}
			return nil
		})
	}
}

// Planted: candidate bookings find 300 of 1000 prompt tokens cached,
// stable ones 600. The shadow step passes (both sidecars load the
// candidate) and the first canary step fails on the prefix-hit ratio:
// rolled back, and no pod stays on the candidate.
func TestRolloutRealSidecarsRollBackAHitRatioDrop(t *testing.T) {
	ro, role, h0, h := realRollout(t, 300)
	rb := ro.Status.LastRollback
	if ro.Status.Phase != v1alpha1.RolloutRolledBack || rb.Hash != h || rb.Step != 1 || rb.Reason != "PrefixHitDrop" || rb.Metric != "prefixHitRatio" || rb.Samples == nil || rb.Samples.Canary < 50 {
		t.Fatalf("phase %s, lastRollback %+v", ro.Status.Phase, rb)
	}
	t.Logf("%s", rollout.RollbackMessage(rb))
	b, err1 := strconv.ParseFloat(rb.Baseline, 64)
	c, err2 := strconv.ParseFloat(rb.Canary, 64)
	if err1 != nil || err2 != nil || b < 0.55 || b > 0.65 || c < 0.25 || c > 0.35 {
		t.Errorf("figures: baseline %s, canary %s; planted 0.6 and 0.3", rb.Baseline, rb.Canary)
	}
	waitPodsOn(t, ro.Namespace, h0)
	testenv.WaitCondition(t, k8s, timeout, role, "Programmed", testenv.Want{Status: metav1.ConditionFalse, Reason: "RolledBack", Generation: testenv.AnyGeneration})
}

// Planted: candidate bookings find 650 of 1000 cached, stable ones 600
// (a useful change). Promoted through both steps; every pod runs it as
// the stable config.
func TestRolloutRealSidecarsPromoteAHitRatioGain(t *testing.T) {
	ro, role, _, h := realRollout(t, 650)
	if ro.Status.Phase != v1alpha1.RolloutPromoted || ro.Status.StableHash != h {
		t.Fatalf("phase %s, stable %s (candidate %s), last rollback %+v", ro.Status.Phase, ro.Status.StableHash, h, ro.Status.LastRollback)
	}
	waitPodsOn(t, ro.Namespace, h)
	testenv.WaitCondition(t, k8s, timeout, role, "Ready", testenv.Want{Status: metav1.ConditionTrue})
}
