package workers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// candidateRegistry holds worker "old" (component=decode-v1) and "new"
// (component=decode-v2), the stable config's decode pool picking v1.
func candidateRegistry(t testing.TB) *Registry {
	t.Helper()
	r := NewRegistry(&fakeDelivery{})
	r.SetPools(map[string]labels.Selector{"decode": labels.SelectorFromSet(labels.Set{"component": "decode-v1"})})
	for id, c := range map[string]string{"old": "decode-v1", "new": "decode-v2"} {
		spec := WorkerSpec{ID: id, Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: "http://10.0.0.1:8000/v1/hints",
			Labels: map[string]string{"component": c}, TopologyDomains: map[string]string{"zone": "a"}, KVTransferDomain: "zone"}
		if err := r.Set(SourceAPI, spec); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestCandidatePools: the candidate's view of the registry puts each
// worker in the candidate's pools while they are in force, and in the
// stable config's otherwise; the stable view never changes with them. A
// worker seen by the candidate keeps its delivery and topology.
func TestCandidatePools(t *testing.T) {
	r := candidateRegistry(t)
	cand := r.Candidate()
	inPools := func(w dispatch.Workers) string {
		return yesNo(w.Lookup("old").InPool("decode")) + " " + yesNo(w.Lookup("new").InPool("decode"))
	}
	if got := inPools(cand); got != "yes no" {
		t.Errorf("no candidate pools: the candidate sees old, new in decode's pool: %s, want the stable config's (yes no)", got)
	}
	r.SetCandidatePools(map[string]labels.Selector{"decode": labels.SelectorFromSet(labels.Set{"component": "decode-v2"})})
	if got := inPools(cand); got != "no yes" {
		t.Errorf("candidate pools: the candidate sees %s, want no yes", got)
	}
	if got := inPools(r); got != "yes no" {
		t.Errorf("candidate pools: the stable config sees %s, want yes no", got)
	}
	// A worker registered while the candidate's pools are in force is
	// placed in them too; a role they lack admits no worker.
	if err := r.Set(SourceAPI, WorkerSpec{ID: "late", Labels: map[string]string{"component": "decode-v2"}}); err != nil {
		t.Fatal(err)
	}
	if !cand.Lookup("late").InPool("decode") || r.Lookup("late").InPool("decode") || cand.Lookup("late").InPool("prefill") {
		t.Error("a worker registered during the canary is not placed in the candidate's pools alone")
	}
	w, ok := r.Get("new")
	if !ok || len(w.InPools) != 0 || len(w.CandidatePools) != 1 || w.CandidatePools[0] != "decode" {
		t.Errorf("new's listing: pools %v, candidate pools %v", w.InPools, w.CandidatePools)
	}
	tw, ok := cand.Lookup("new").(dispatch.TopologyWorker)
	if !ok {
		t.Fatal("the candidate's worker lost its topology")
	}
	if v, _ := tw.TopologyDomain("zone"); v != "a" || !tw.HintCapable() || !tw.Deliver([]byte("{}"), time.Now()) {
		t.Error("the candidate's worker is not the registered one (topology, router_hint, delivery)")
	}
	if cand.Lookup("nobody") != nil {
		t.Error("an unknown worker is not nil to the candidate")
	}

	r.SetCandidatePools(nil)
	if got := inPools(cand); got != "yes no" {
		t.Errorf("candidate pools dropped: the candidate sees %s, want the stable config's (yes no)", got)
	}
	if w, _ := r.Get("new"); w.CandidatePools != nil {
		t.Errorf("candidate pools listed after they were dropped: %v", w.CandidatePools)
	}
}

// podLabelled is a pod with labels l.
func podLabelled(l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: l}}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// TestPodWorkersCandidatePools: while a candidate is staged, the pods its
// pools pick are workers too, and the watch asks for what both configs'
// pools share.
func TestPodWorkersCandidatePools(t *testing.T) {
	sel := func(s string) labels.Selector { return parseSelector(t, s) }
	p := &PodWorkers{Registry: NewRegistry(nil)}
	p.SetPools(map[string]labels.Selector{"decode": sel("app=llama,component=decode-v1")}, false)
	v2 := podLabelled(map[string]string{"app": "llama", "component": "decode-v2"})
	if p.wanted(v2) || p.watchSelector().String() != "app=llama,component=decode-v1" {
		t.Fatalf("stable pools alone: v2 wanted %v, watch %q", p.wanted(v2), p.watchSelector())
	}
	p.SetCandidatePools(map[string]labels.Selector{"decode": sel("app=llama,component=decode-v2")}, false)
	if !p.wanted(v2) || p.watchSelector().String() != "app=llama" {
		t.Errorf("candidate pools: v2 wanted %v, watch %q (want true, app=llama)", p.wanted(v2), p.watchSelector())
	}
	p.SetCandidatePools(map[string]labels.Selector{"decode": labels.Everything()}, true)
	if !p.wanted(podLabelled(nil)) || p.watchSelector().String() != "" {
		t.Errorf("a candidate role that takes any worker: watch %q", p.watchSelector())
	}
	p.SetCandidatePools(nil, false)
	if p.wanted(v2) || p.watchSelector().String() != "app=llama,component=decode-v1" {
		t.Errorf("candidate gone: v2 wanted %v, watch %q", p.wanted(v2), p.watchSelector())
	}
}

// BenchmarkLookupInPool is the registry's part of a booking (look the
// worker up, ask its pool) for the stable config and for a staged
// candidate with pools of its own: the candidate's must not allocate.
func BenchmarkLookupInPool(b *testing.B) {
	r := candidateRegistry(b)
	r.SetCandidatePools(map[string]labels.Selector{"decode": labels.SelectorFromSet(labels.Set{"component": "decode-v2"})})
	for _, tc := range []struct {
		name string
		w    dispatch.Workers
	}{{"stable", r}, {"candidate", r.Candidate()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if w := tc.w.Lookup("new"); w != nil && w.InPool("decode") {
					n++
				}
			}
			_ = n
		})
	}
}
