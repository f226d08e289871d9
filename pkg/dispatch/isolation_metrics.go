package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// isolationMetrics are the series of policy isolation: overruns (runs
// kept although late), abandoned runs, ejections and the state of each
// policy that may block. Overruns are two counters, not a histogram: every
// policy of every role has them, the built-ins included.
type isolationMetrics struct {
	overruns        *prometheus.CounterVec
	overrunSeconds  *prometheus.CounterVec
	abandonedReturn *prometheus.HistogramVec
	ejections       *prometheus.CounterVec
	ejected         *prometheus.GaugeVec
	probation       *prometheus.GaugeVec
	skipped         *prometheus.CounterVec
	stuck           *prometheus.GaugeVec
}

// overrunBuckets span 1 ms (the default deadline) to about 16 s.
var abandonedBuckets = prometheus.ExponentialBuckets(1e-3, 4, 8)

func newIsolationMetrics(reg prometheus.Registerer) *isolationMetrics {
	labels := []string{"role", "policy", "policy_type"}
	m := &isolationMetrics{
		overruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "policy_overruns_total",
			Help: "Policy runs that returned after their deadline and whose actions were kept (the time was spent), by role, policy and policy type.",
		}, labels),
		overrunSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "policy_overrun_seconds_total",
			Help: "Time the runs of policy_overruns_total took, in all, by role, policy and policy type.",
		}, labels),
		abandonedReturn: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "policy_abandoned_run_duration_seconds",
			Help:    "Duration of the policy runs that returned after the booking had stopped waiting for them (hard deadline), by role, policy and policy type; their actions were dropped.",
			Buckets: abandonedBuckets,
		}, labels),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "policy_ejections_total",
			Help: "Ejections of a policy from its role's path, by role, policy, policy type and reason (overrun, abandoned, busy).",
		}, append(labels, "reason")),
		ejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "policy_ejected",
			Help: "1 while a policy is ejected from its role's path (bookings skip it), by role, policy and policy type.",
		}, labels),
		probation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "policy_probation",
			Help: "1 while a re-admitted policy is on probation (one overrun ejects it again), by role, policy and policy type.",
		}, labels),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "policy_runs_skipped_total",
			Help: "Bookings that did not run a policy, by role, policy, policy type and reason (ejected; busy: the policy had its most runs in flight).",
		}, append(labels, "reason")),
		stuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "policy_abandoned_runs",
			Help: "Runs of a policy abandoned at the hard deadline that have not returned yet (goroutines held), by role, policy and policy type.",
		}, labels),
	}
	if reg != nil {
		reg.MustRegister(m.overruns, m.overrunSeconds, m.abandonedReturn, m.ejections, m.ejected, m.probation, m.skipped, m.stuck)
	}
	return m
}

// isolationSeries are one policy's pre-resolved isolation series.
type isolationSeries struct {
	abandonedReturn             prometheus.Observer
	ejections                   map[EjectReason]prometheus.Counter
	ejected, probation, stuck   prometheus.Gauge
	skippedEjected, skippedBusy prometheus.Counter
}

// forPolicy resolves the series of a policy that may block.
func (m *isolationMetrics) forPolicy(role, policy, typ string) *isolationSeries {
	s := &isolationSeries{
		abandonedReturn: m.abandonedReturn.WithLabelValues(role, policy, typ),
		ejections:       map[EjectReason]prometheus.Counter{},
		ejected:         m.ejected.WithLabelValues(role, policy, typ),
		probation:       m.probation.WithLabelValues(role, policy, typ),
		stuck:           m.stuck.WithLabelValues(role, policy, typ),
		skippedEjected:  m.skipped.WithLabelValues(role, policy, typ, PolicyEjected.String()),
		skippedBusy:     m.skipped.WithLabelValues(role, policy, typ, EjectBusy.String()),
	}
	for _, r := range []EjectReason{EjectOverrun, EjectAbandoned, EjectBusy} {
		s.ejections[r] = m.ejections.WithLabelValues(role, policy, typ, r.String())
	}
	return s
}

// overrunSeries count one policy's runs past its deadline, kept.
type overrunSeries struct{ runs, seconds prometheus.Counter }

func (s overrunSeries) observe(d time.Duration) {
	s.runs.Inc()
	s.seconds.Add(d.Seconds())
}

// overrunOf resolves the overrun series of a policy.
func (m *isolationMetrics) overrunOf(role, policy, typ string) overrunSeries {
	return overrunSeries{runs: m.overruns.WithLabelValues(role, policy, typ), seconds: m.overrunSeconds.WithLabelValues(role, policy, typ)}
}

// vecs are the isolation metrics, each labelled by a policy instance's
// role, policy and policy_type: Metrics.hintVecs lists them, so that a
// reload deletes the series of a policy that left the config, built-ins'
// overruns included.
func (m *isolationMetrics) vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.overruns.MetricVec, m.overrunSeconds.MetricVec, m.abandonedReturn.MetricVec, m.ejections.MetricVec,
		m.ejected.MetricVec, m.probation.MetricVec, m.skipped.MetricVec, m.stuck.MetricVec}
}
