package outcomes

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

// Metrics are the outcome series, labelled by role and config hash: a
// Prometheus provider compares a candidate's with the stable config's. The
// config_hash label takes at most the Store's MaxHashes values: a hash the
// store forgets loses its series.
type Metrics struct {
	requests *prometheus.CounterVec
	prompt   *prometheus.CounterVec
	cached   *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
}

// Results of kvhint_outcome_requests_total.
const (
	ResultOK           = "ok"
	ResultError        = "error"
	ResultHintRejected = "hint_rejected"
)

// NewMetrics registers the outcome series in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_outcome_requests_total",
			Help: "Request outcomes the router reported, by role, the config that booked them and result: ok, error, or hint_rejected (served, the worker refused the hint)."},
			[]string{"role", "config_hash", "result"}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_outcome_prompt_tokens_total",
			Help: "Prompt tokens of the reported requests, by role and the config that booked them."}, []string{"role", "config_hash"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvhint_outcome_cached_tokens_total",
			Help: "Prompt tokens the engines served from their prefix caches, of the reported requests, by role and the config that booked them."},
			[]string{"role", "config_hash"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvhint_outcome_ttft_seconds",
			Help:    "Time to the first token of the reported requests that got one, by role and the config that booked them.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"role", "config_hash"}),
	}
	reg.MustRegister(m.requests, m.prompt, m.cached, m.ttft)
	return m
}

// series are one role's and config hash's series, looked up once.
type series struct {
	ok, failed, rejected prometheus.Counter
	prompt, cached       prometheus.Counter
	ttft                 prometheus.Observer
}

func (m *Metrics) series(role, hash string) *series {
	if m == nil {
		return nil
	}
	return &series{
		ok: m.requests.WithLabelValues(role, hash, ResultOK), failed: m.requests.WithLabelValues(role, hash, ResultError),
		rejected: m.requests.WithLabelValues(role, hash, ResultHintRejected),
		prompt:   m.prompt.WithLabelValues(role, hash), cached: m.cached.WithLabelValues(role, hash), ttft: m.ttft.WithLabelValues(role, hash),
	}
}

func (s *series) observe(o *bookingapi.Outcome) {
	if s == nil {
		return
	}
	switch {
	case o.Error != "":
		s.failed.Inc()
	case o.HintRejected:
		s.rejected.Inc()
	default:
		s.ok.Inc()
	}
	s.prompt.Add(float64(o.PromptTokens))
	s.cached.Add(float64(o.CachedTokens))
	if o.Error == "" && o.TTFTSeconds > 0 {
		s.ttft.Observe(o.TTFTSeconds)
	}
}

// forget deletes the series of a config hash.
func (m *Metrics) forget(hash string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"config_hash": hash}
	m.requests.DeletePartialMatch(l)
	m.prompt.DeletePartialMatch(l)
	m.cached.DeletePartialMatch(l)
	m.ttft.DeletePartialMatch(l)
}
