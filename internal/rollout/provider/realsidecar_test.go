package provider

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/outcomes"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

type shadowCounts map[string]*rolloutapi.ShadowCounts

func (s shadowCounts) Shadow() map[string]*rolloutapi.ShadowCounts { return s }

// TestMeasureFromTheSidecarsOutcomeRoute: the provider against the
// sidecar's own outcome store and ops route on loopback, as a router pod
// serves them; outcomes reported before the step started stay out.
func TestMeasureFromTheSidecarsOutcomeRoute(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	clock := func() time.Time { return now }
	var pods []corev1.Pod
	for _, name := range []string{"router-a", "router-b"} {
		store := outcomes.NewStore(outcomes.Options{Now: clock})
		report := func(hash string, n, cached int, ttft float64, failed bool) {
			for range n {
				o := bookingapi.Outcome{Role: "decode", ConfigHash: hash, PromptTokens: 1000, CachedTokens: cached, TTFTSeconds: ttft}
				if failed {
					o.Error, o.TTFTSeconds = "engine answered 503", 0
				}
				if err := store.Add(&o); err != nil {
					t.Fatal(err)
				}
			}
		}
		report(stableHash, 50, 0, 9, false) // before the step: left out
		now = now.Add(time.Minute)
		report(stableHash, 300, 700, 0.1, false)
		report(candidateHash, 290, 500, 0.1, false)
		report(candidateHash, 10, 0, 0, true)
		srv := httptest.NewServer(outcomes.Handler(store, name, shadowCounts{candidateHash: {Bookings: 40, Differ: 4}}))
		t.Cleanup(srv.Close)
		pods = append(pods, routerPod(name, "127.0.0.1", portOf(t, srv.URL), true))
		now = now.Add(-time.Minute)
	}
	since := now.Add(time.Minute)
	m, err := NewSidecars(SidecarOptions{AllowLoopback: true}).Measure(context.Background(),
		Query{Namespace: "inference", Router: "llama", Pods: pods, Stable: stableHash, Candidate: candidateHash, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Sources {
		if s.Error != "" {
			t.Fatalf("%s: %s", s.Name, s.Error)
		}
	}
	b, c := m.Input.Baseline.Summarize(), m.Input.Canary.Summarize()
	if b.Requests != 600 || b.PrefixHitRatio != 0.7 || b.TTFTP90Seconds != 0.1 || c.Requests != 600 || c.PrefixHitRatio != 0.5 || c.ErrorRate != 20.0/600 {
		t.Fatalf("baseline %+v canary %+v", b, c)
	}
	if m.Shadow.Bookings != 80 || m.Shadow.Differ != 8 {
		t.Fatalf("shadow %+v", m.Shadow)
	}
	v := analysis.Judge(analysis.DefaultThresholds(), m.Input)
	if v.Phase != analysis.Failed || v.Metric != analysis.MetricPrefixHitRatio {
		t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
	}
	t.Log(v.Message)

	// The same config on both arms is refused, not compared.
	if _, err := NewSidecars(SidecarOptions{AllowLoopback: true}).Measure(context.Background(),
		Query{Namespace: "inference", Router: "llama", Pods: pods, Stable: stableHash, Candidate: stableHash, Since: since}); err == nil {
		t.Fatal("stable = candidate: want an error")
	}
}
