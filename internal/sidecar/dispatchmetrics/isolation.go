package dispatchmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
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

// abandonedBuckets span 1 ms (the default deadline) to about 16 s.
var abandonedBuckets = prometheus.ExponentialBuckets(1e-3, 4, 8)

func newIsolationMetrics() *isolationMetrics {
	labels := []string{"role", "policy", "policy_type"}
	return &isolationMetrics{
		overruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "policy_overruns_total",
			Help: "Policy runs that returned after their deadline and whose actions were kept (the time was spent), by role, policy and policy type.",
		}, labels),
		overrunSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "policy_overrun_seconds_total",
			Help: "Time the runs of policy_overruns_total took, in all, by role, policy and policy type.",
		}, labels),
		abandonedReturn: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "policy_abandoned_run_duration_seconds",
			Help:    "Duration of the policy runs that returned after the booking had stopped waiting for them (hard deadline), by role, policy and policy type; their actions were dropped.",
			Buckets: abandonedBuckets,
		}, labels),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "policy_ejections_total",
			Help: "Ejections of a policy from its role's path, by role, policy, policy type and reason (overrun, abandoned, busy).",
		}, append(labels, "reason")),
		ejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "policy_ejected",
			Help: "1 while a policy is ejected from its role's path (bookings skip it), by role, policy and policy type.",
		}, labels),
		probation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "policy_probation",
			Help: "1 while a re-admitted policy is on probation (one overrun ejects it again), by role, policy and policy type.",
		}, labels),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "policy_runs_skipped_total",
			Help: "Bookings that did not run a policy, by role, policy, policy type and reason (ejected; busy: the policy had its most runs in flight).",
		}, append(labels, "reason")),
		stuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "policy_abandoned_runs",
			Help: "Runs of a policy abandoned at the hard deadline that have not returned yet (goroutines held), by role, policy and policy type.",
		}, labels),
	}
}

func (m *isolationMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.overruns, m.overrunSeconds, m.abandonedReturn, m.ejections, m.ejected, m.probation, m.skipped, m.stuck}
}

// vecs are the isolation metrics, each labelled by a policy instance's
// role, policy and policy_type: Metrics.hintVecs lists them, so that a
// reload deletes the series of a policy that left the config, built-ins'
// overruns included.
func (m *isolationMetrics) vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.overruns.MetricVec, m.overrunSeconds.MetricVec, m.abandonedReturn.MetricVec, m.ejections.MetricVec,
		m.ejected.MetricVec, m.probation.MetricVec, m.skipped.MetricVec, m.stuck.MetricVec}
}

// isolationSeries are the isolation series of one policy: labels are its
// role, policy and policy_type.
type isolationSeries struct {
	m      *isolationMetrics
	labels [3]string
}

func (s isolationSeries) Ejections(reason dispatch.EjectReason) dispatch.Counter {
	return s.m.ejections.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], reason.String())
}

func (s isolationSeries) Ejected() dispatch.Gauge { return s.m.ejected.WithLabelValues(s.labels[:]...) }
func (s isolationSeries) Probation() dispatch.Gauge {
	return s.m.probation.WithLabelValues(s.labels[:]...)
}

func (s isolationSeries) SkippedEjected() dispatch.Counter {
	return s.m.skipped.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], dispatch.PolicyEjected.String())
}

func (s isolationSeries) SkippedBusy() dispatch.Counter {
	return s.m.skipped.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], dispatch.EjectBusy.String())
}

func (s isolationSeries) AbandonedRuns() dispatch.Gauge {
	return s.m.stuck.WithLabelValues(s.labels[:]...)
}

func (s isolationSeries) AbandonedRunSeconds() dispatch.Observer {
	return s.m.abandonedReturn.WithLabelValues(s.labels[:]...)
}
