package dispatchmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// Namespace prefixes every metric name of the sidecar.
const Namespace = "kvhint_router"

// Metrics are the dispatcher's Prometheus metrics: bookings, policy runs,
// isolation and config loads. The dispatcher resolves the series of the
// booking path once per config load, never per booking.
type Metrics struct {
	bookings      *prometheus.CounterVec
	bookingErrors *prometheus.CounterVec
	buildSeconds  *prometheus.HistogramVec
	actions       *prometheus.CounterVec
	failures      *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	copiesDropped *prometheus.CounterVec
	iso           *isolationMetrics

	configInfo        *prometheus.GaugeVec
	reloads           *prometheus.CounterVec
	lastReloadOK      prometheus.Gauge
	lastReloadSuccess prometheus.Gauge
	lastReloadFailure prometheus.Gauge
}

var _ dispatch.Metrics = (*Metrics)(nil)

// New creates the dispatcher's metrics and registers them with reg; a nil
// reg keeps them unregistered (counted, never exported). One Metrics
// serves one dispatcher: a second one on the same registry would register
// the same names again (MustRegister panics), so another dispatcher of the
// sidecar takes Options.Metrics nil, or a Metrics of its own on a
// registry of its own or wrapped with a constant label
// (prometheus.WrapRegistererWith).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.bookings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "bookings_total",
		Help: "Bookings handled, by role and outcome (hinted, no_actions, not_hint_capable, unknown_worker, not_in_pool).",
	}, []string{"role", "outcome"})
	m.bookingErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "booking_errors_total",
		Help: "Bookings refused, by reason (unknown_role, invalid, not_ready, too_large).",
	}, []string{"reason"})
	m.buildSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "hint_build_duration_seconds",
		Help: "Time to run a role's hint policies for one booking, by role.",
		// 1 µs to about 16 ms: the budget is microseconds, a policy deadline is 1 ms.
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 15),
	}, []string{"role"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "actions_total",
		Help: "Actions kept in hints, by role, policy (name or type) and policy type.",
	}, []string{"role", "policy", "policy_type"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "policy_failures_total",
		Help: "Policy runs whose actions were all dropped, by role, policy, policy type and reason (error, panic, deadline: not returned by the hard deadline, malformed).",
	}, []string{"role", "policy", "policy_type", "reason"})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "actions_dropped_total",
		Help: "Actions dropped, by role, policy, policy type and reason (malformed, over_limit; error, panic and abandoned runs return none).",
	}, []string{"role", "policy", "policy_type", "reason"})
	m.copiesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "kv_copies_dropped_total",
		Help: "Committed KV copies dropped before the policies ran (only the kv.fetch is lost), by role and reason (unknown_source, unknown_source_rank).",
	}, []string{"role", "reason"})

	m.iso = newIsolationMetrics()

	m.configInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "config_info",
		Help: "1 for the hash of the hints config in force.",
	}, []string{"hash"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "config_reloads_total",
		Help: "Config loads, by result: success, or failure (counted once per distinct refused document or source error).",
	}, []string{"result"})
	m.lastReloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "config_last_reload_successful",
		Help: "1 if the last config load succeeded, 0 if it failed and the previous config is kept.",
	})
	m.lastReloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful config load.",
	})
	m.lastReloadFailure = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "config_last_reload_failure_timestamp_seconds",
		Help: "Unix time of the last failed config load.",
	})
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

// collectors are every metric of m, registered together.
func (m *Metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.bookings, m.bookingErrors, m.buildSeconds, m.actions, m.failures, m.dropped, m.copiesDropped,
		m.configInfo, m.reloads, m.lastReloadOK, m.lastReloadSuccess, m.lastReloadFailure}, m.iso.collectors()...)
}

// Refusals is booking_errors_total of reason.
func (m *Metrics) Refusals(reason dispatch.Refusal) dispatch.Counter {
	return m.bookingErrors.WithLabelValues(reason.String())
}

// Role returns the series labelled by a role.
func (m *Metrics) Role(role string) dispatch.RoleMetrics { return roleSeries{m: m, role: role} }

// Policy returns the series labelled by a policy instance.
func (m *Metrics) Policy(role, policy, policyType string) dispatch.PolicyMetrics {
	return policySeries{m: m, labels: [3]string{role, policy, policyType}}
}

// Isolation returns the isolation series of a policy that may block.
func (m *Metrics) Isolation(role, policy, policyType string) dispatch.IsolationMetrics {
	return isolationSeries{m: m.iso, labels: [3]string{role, policy, policyType}}
}

// ConfigLoaded counts a successful load and moves config_info to hash.
func (m *Metrics) ConfigLoaded(hash, previous string, at time.Time) {
	m.reloads.WithLabelValues("success").Inc()
	m.lastReloadOK.Set(1)
	m.lastReloadSuccess.Set(unixSeconds(at))
	if previous != "" && previous != hash {
		m.configInfo.DeleteLabelValues(previous)
	}
	m.configInfo.WithLabelValues(hash).Set(1)
}

// ConfigFailed counts a failed load.
func (m *Metrics) ConfigFailed(at time.Time) {
	m.reloads.WithLabelValues("failure").Inc()
	m.lastReloadOK.Set(0)
	m.lastReloadFailure.Set(unixSeconds(at))
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// roleVecs are the metrics with a role label; hintVecs those with a
// policy instance's role, policy and policy_type labels. A metric added
// to either kind belongs in its list, so that a reload deletes its series.
func (m *Metrics) roleVecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.bookings.MetricVec, m.buildSeconds.MetricVec, m.copiesDropped.MetricVec}
}

func (m *Metrics) hintVecs() []*prometheus.MetricVec {
	return append([]*prometheus.MetricVec{m.actions.MetricVec, m.failures.MetricVec, m.dropped.MetricVec}, m.iso.vecs()...)
}

// ForgetRole deletes every series of a role that left the config, so that
// /metrics holds the series of the config in force and not of every config
// ever loaded.
func (m *Metrics) ForgetRole(role string) {
	for _, v := range append(m.roleVecs(), m.hintVecs()...) {
		v.DeletePartialMatch(prometheus.Labels{"role": role})
	}
}

// ForgetPolicy deletes the series of a policy instance that left its role.
func (m *Metrics) ForgetPolicy(role, policy, policyType string) {
	for _, v := range m.hintVecs() {
		v.DeletePartialMatch(prometheus.Labels{"role": role, "policy": policy, "policy_type": policyType})
	}
}

// roleSeries are the series of one role.
type roleSeries struct {
	m    *Metrics
	role string
}

func (r roleSeries) Bookings(outcome dispatch.Outcome) dispatch.Counter {
	return r.m.bookings.WithLabelValues(r.role, outcome.String())
}

func (r roleSeries) BuildSeconds() dispatch.Observer { return r.m.buildSeconds.WithLabelValues(r.role) }

func (r roleSeries) CopiesDropped(reason dispatch.CopyDrop) dispatch.Counter {
	return r.m.copiesDropped.WithLabelValues(r.role, reason.String())
}

// policySeries are the series of one policy instance: labels are its
// role, policy and policy_type.
type policySeries struct {
	m      *Metrics
	labels [3]string
}

func (p policySeries) Actions() dispatch.Counter { return p.m.actions.WithLabelValues(p.labels[:]...) }

func (p policySeries) Failures(reason dispatch.DropReason) dispatch.Counter {
	return p.m.failures.WithLabelValues(p.labels[0], p.labels[1], p.labels[2], reason.String())
}

func (p policySeries) Dropped(reason dispatch.DropReason) dispatch.Counter {
	return p.m.dropped.WithLabelValues(p.labels[0], p.labels[1], p.labels[2], reason.String())
}

func (p policySeries) Overruns() dispatch.Counter {
	return p.m.iso.overruns.WithLabelValues(p.labels[:]...)
}

func (p policySeries) OverrunSeconds() dispatch.Counter {
	return p.m.iso.overrunSeconds.WithLabelValues(p.labels[:]...)
}
