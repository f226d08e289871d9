package promserver_test

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/tools/promserver"
)

const (
	stable    = "00000000000000aa"
	candidate = "00000000000000bb"
)

// routerSeries are one router pod's outcome and shadow series, as the
// sidecar exports them (the same names, labels and TTFT buckets), on a
// real /metrics endpoint on loopback.
type routerSeries struct {
	mu       sync.Mutex
	requests *prometheus.CounterVec
	prompt   *prometheus.CounterVec
	cached   *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
	shadow   *prometheus.CounterVec
	actions  *prometheus.CounterVec
	srv      *httptest.Server
	// sent counts the requests reported, by config.
	sent map[string]int
}

func newRouterSeries(t *testing.T) *routerSeries {
	reg := prometheus.NewRegistry()
	r := &routerSeries{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_outcome_requests_total"}, []string{"role", "config_hash", "result"}),
		prompt:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_outcome_prompt_tokens_total"}, []string{"role", "config_hash"}),
		cached:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_outcome_cached_tokens_total"}, []string{"role", "config_hash"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvhint_outcome_ttft_seconds",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"role", "config_hash"}),
		shadow:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_shadow_bookings_total"}, []string{"role", "result"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_shadow_action_diff_total"}, []string{"role", "action"}),
		sent:    map[string]int{},
	}
	reg.MustRegister(r.requests, r.prompt, r.cached, r.ttft, r.shadow, r.actions)
	// Every series exists at 0 before the first scrape, as increase()
	// needs to count the first requests.
	for _, h := range []string{stable, candidate} {
		for _, res := range []string{"ok", "error", "hint_rejected"} {
			r.requests.WithLabelValues("decode", h, res)
		}
		r.prompt.WithLabelValues("decode", h)
		r.cached.WithLabelValues("decode", h)
		r.ttft.WithLabelValues("decode", h)
	}
	for _, res := range []string{"same", "differ", "candidate_error"} {
		r.shadow.WithLabelValues("decode", res)
	}
	r.actions.WithLabelValues("decode", "kv.fetch")
	r.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(r.srv.Close)
	return r
}

// report records one request booked by config hash: a prompt of 2048
// tokens, hit of them cached (+-0.25, in 16-token blocks), a TTFT around
// ttft seconds, failing at errRate.
func (r *routerSeries) report(rng *rand.Rand, hash string, hit, ttft, errRate float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[hash]++
	const prompt = 2048
	if rng.Float64() < errRate {
		r.requests.WithLabelValues("decode", hash, "error").Inc()
		r.prompt.WithLabelValues("decode", hash).Add(prompt)
		return
	}
	f := min(max(hit+(rng.Float64()-0.5)*0.5, 0), 1)
	cached := math.Floor(f*prompt/16) * 16
	r.requests.WithLabelValues("decode", hash, "ok").Inc()
	r.prompt.WithLabelValues("decode", hash).Add(prompt)
	r.cached.WithLabelValues("decode", hash).Add(cached)
	r.ttft.WithLabelValues("decode", hash).Observe(ttft * math.Exp(rng.NormFloat64()*0.3))
}

// TestPrometheusProviderAgainstPrometheus runs a real Prometheus, built
// from its Go module, scraping two routers' real /metrics endpoints every
// second while traffic flows: router llama's candidate plants a 10-point
// drop of the prefix-hit ratio, router mistral's candidate behaves as its
// stable config, request for request. The provider's queries must reach
// the planted figures through Prometheus' own engine and API, and the
// analysis must fail llama's candidate and pass mistral's.
func TestPrometheusProviderAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a Prometheus server")
	}
	bin := promserver.Build(t)
	llama, mistral := newRouterSeries(t), newRouterSeries(t)
	target := func(r *routerSeries, router, pod string) promserver.Target {
		return promserver.Target{Address: strings.TrimPrefix(r.srv.URL, "http://"),
			Labels: map[string]string{"namespace": "inference", "router": router, "pod": pod}}
	}
	srv := promserver.Start(t, bin, time.Second, []promserver.Target{target(llama, "llama", "llama-0"), target(mistral, "mistral", "mistral-0")})

	// A scrape of the zeroed series (6 per router) before the window starts.
	srv.WaitFor(t, "count(kvhint_outcome_requests_total)", 12, time.Minute)
	since := time.Now()
	rngL := rand.New(rand.NewPCG(1, 1))
	rngMS, rngMC := rand.New(rand.NewPCG(2, 2)), rand.New(rand.NewPCG(2, 2))
	ticker := time.NewTicker(40 * time.Millisecond)
	for end := since.Add(12 * time.Second); time.Now().Before(end); <-ticker.C {
		llama.report(rngL, stable, 0.6, 0.1, 0.01)
		llama.report(rngL, candidate, 0.5, 0.1, 0.01)
		// The same draws for both of mistral's configs: no difference.
		mistral.report(rngMS, stable, 0.6, 0.1, 0.01)
		mistral.report(rngMC, candidate, 0.6, 0.1, 0.01)
		llama.mu.Lock()
		llama.shadow.WithLabelValues("decode", "same").Add(9)
		llama.shadow.WithLabelValues("decode", "differ").Inc()
		llama.actions.WithLabelValues("decode", "kv.fetch").Inc()
		llama.mu.Unlock()
	}
	ticker.Stop()
	// Until a scrape has taken the last counts in.
	for router, r := range map[string]*routerSeries{"llama": llama, "mistral": mistral} {
		r.mu.Lock()
		total := r.sent[stable] + r.sent[candidate]
		r.mu.Unlock()
		srv.WaitFor(t, `sum(kvhint_outcome_requests_total{router="`+router+`"})`, float64(total), time.Minute)
	}
	until := time.Now()

	p, err := provider.NewPrometheus(provider.PrometheusOptions{Address: srv.URL, Step: 2 * time.Second, AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	th := analysis.DefaultThresholds()
	measure := func(router string, series *routerSeries) (provider.Measurement, analysis.Verdict) {
		t.Helper()
		m, err := p.Measure(context.Background(), provider.Query{Namespace: "inference", Router: router,
			Stable: stable, Candidate: candidate, Since: since, Until: until})
		if err != nil {
			t.Fatal(err)
		}
		if m.Sources[0].Error != "" {
			t.Fatalf("%s: %s", router, m.Sources[0].Error)
		}
		series.mu.Lock()
		sent := series.sent[stable]
		series.mu.Unlock()
		for name, arm := range map[string]analysis.Arm{"baseline": m.Input.Baseline, "canary": m.Input.Canary} {
			// increase() extrapolates to the window's edges: near, not equal.
			if d := math.Abs(float64(arm.Requests-int64(sent))) / float64(sent); d > 0.15 {
				t.Errorf("%s %s: %d requests, %d sent", router, name, arm.Requests, sent)
			}
			if len(arm.HitRatios) < 4 || len(arm.TTFTs) < 4 {
				t.Errorf("%s %s: %d hit-ratio and %d TTFT steps", router, name, len(arm.HitRatios), len(arm.TTFTs))
			}
		}
		v := analysis.Judge(th, m.Input)
		t.Logf("%s: %d requests sent per config; %s %s: %s", router, sent, v.Phase, v.Reason, v.Message)
		return m, v
	}

	m, v := measure("llama", llama)
	b, c := m.Input.Baseline, m.Input.Canary
	// Planted: 0.6 and 0.5 of the prompt, less the block rounding (under
	// 16 of 2048 tokens) and the 1% of failed requests whose prompt
	// counts with nothing cached.
	if math.Abs(b.PrefixHitRatio()-0.59) > 0.02 || math.Abs(c.PrefixHitRatio()-0.49) > 0.02 {
		t.Errorf("llama: prefix-hit ratio %.4f -> %.4f, want about 0.59 -> 0.49", b.PrefixHitRatio(), c.PrefixHitRatio())
	}
	if b.TTFTP90 <= 0.05 || b.TTFTP90 > 0.4 {
		t.Errorf("llama: TTFT p90 %v, want near 0.15s", b.TTFTP90)
	}
	if v.Phase != analysis.Failed || v.Metric != analysis.MetricPrefixHitRatio {
		t.Errorf("llama: %s %s, want Failed by the prefix-hit ratio", v.Phase, v.Metric)
	}
	if m.Shadow.Differ == 0 || m.Shadow.Bookings < 9*m.Shadow.Differ || m.Shadow.ByAction["kv.fetch"] == 0 {
		t.Errorf("llama: shadow counts %+v", m.Shadow)
	}

	// The same figures through query overrides written as a user would.
	sel := `{namespace="{{namespace}}",router="{{router}}",config_hash="{{hash}}"}`
	over, err := provider.NewPrometheus(provider.PrometheusOptions{Address: srv.URL, Step: 2 * time.Second, AllowLoopback: true,
		Queries: map[string]string{
			provider.OverridePrefixHit: `sum(increase(kvhint_outcome_cached_tokens_total` + sel + `[{{window}}])) / sum(increase(kvhint_outcome_prompt_tokens_total` + sel + `[{{window}}]))`,
			provider.OverrideErrorRate: `sum(increase(kvhint_outcome_requests_total{result="error",` + sel[1:] + `[{{window}}])) / sum(increase(kvhint_outcome_requests_total` + sel + `[{{window}}]))`,
		}})
	if err != nil {
		t.Fatal(err)
	}
	mo, err := over.Measure(context.Background(), provider.Query{Namespace: "inference", Router: "llama",
		Stable: stable, Candidate: candidate, Since: since, Until: until})
	if err != nil || mo.Sources[0].Error != "" {
		t.Fatalf("overrides: %v %+v", err, mo.Sources)
	}
	for name, pair := range map[string][2]analysis.Arm{"baseline": {b, mo.Input.Baseline}, "canary": {c, mo.Input.Canary}} {
		def, ovr := pair[0], pair[1]
		if mo.Input.Baseline.HitRatio == nil || math.Abs(def.PrefixHitRatio()-ovr.PrefixHitRatio()) > 0.002 || len(ovr.HitRatios) != len(def.HitRatios) {
			t.Errorf("override %s: prefix hit %v (%d steps), default %v (%d steps)", name, ovr.PrefixHitRatio(), len(ovr.HitRatios), def.PrefixHitRatio(), len(def.HitRatios))
		}
		if d := ovr.Errors - def.Errors; d < -1 || d > 1 {
			t.Errorf("override %s: %d errors, default %d", name, ovr.Errors, def.Errors)
		}
	}
	if vo := analysis.Judge(th, mo.Input); vo.Phase != analysis.Failed || vo.Metric != analysis.MetricPrefixHitRatio {
		t.Errorf("overrides: %s %s: %s", vo.Phase, vo.Reason, vo.Message)
	}

	m, v = measure("mistral", mistral)
	if d := m.Input.Baseline.PrefixHitRatio() - m.Input.Canary.PrefixHitRatio(); math.Abs(d) > 1e-9 {
		t.Errorf("mistral: the arms' prefix-hit ratios differ by %v", d)
	}
	if v.Phase != analysis.Successful {
		t.Errorf("mistral: %s %s, want Successful", v.Phase, v.Reason)
	}

	// A query the server refuses (a range query over more than 11,000
	// steps) makes the server unanswered.
	m, err = p.Measure(context.Background(), provider.Query{Namespace: "inference", Router: "llama", Stable: stable, Candidate: candidate,
		Since: until.Add(-time.Hour * 24 * 365 * 100), Until: until})
	if err != nil {
		t.Fatal(err)
	}
	if m.Sources[0].Error == "" || len(m.Input.Unanswered) != 1 {
		t.Errorf("a 100-year range: source %+v", m.Sources[0])
	}
	t.Logf("a refused query: %s", m.Sources[0].Error)
}
