package dispatch

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsNamespace prefixes every metric name of the dispatcher and the sidecar.
const MetricsNamespace = "kvhint_router"

// Booking outcomes, the outcome label of bookings_total.
const (
	outcomeHinted        = "hinted"           // a hint was built and handed to delivery
	outcomeNoActions     = "no_actions"       // the policies kept no action: no message
	outcomeNotCapable    = "not_hint_capable" // the worker does not advertise router_hint
	outcomeUnknownWorker = "unknown_worker"   // the worker is not in the registry
	outcomeNotInPool     = "not_in_pool"      // the worker is outside the role's worker pool
)

// Booking errors, the reason label of booking_errors_total.
const (
	bookingErrUnknownRole = "unknown_role"
	bookingErrInvalid     = "invalid"
	bookingErrNotReady    = "not_ready"
	bookingErrTooLarge    = "too_large"
)

// DropReason says why a policy's actions were not sent. The values are the
// reason label of policy_failures_total and actions_dropped_total.
type DropReason int

const (
	// DropError: the policy returned an error.
	DropError DropReason = iota
	// DropPanic: the policy panicked.
	DropPanic
	// DropDeadline: the policy, one that may block, had not returned by
	// its hard deadline; the booking answered without it.
	DropDeadline
	// DropMalformed: the policy emitted an action with a bad type, version
	// or payload, or a payload that breaks its action type's consumer rules.
	DropMalformed
	// DropOverLimit: the booking already carried MaxActions actions. This
	// is not a failure of the policy, only a drop.
	DropOverLimit
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{"error", "panic", "deadline", "malformed", "over_limit"}

// String is the metric label value.
func (r DropReason) String() string {
	if r < 0 || r >= numDropReasons {
		return "unknown"
	}
	return dropReasonNames[r]
}

// Metrics are the dispatcher's Prometheus metrics: bookings, policy runs and
// config loads. Label values used on the booking path are resolved once per
// config load, never per booking.
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

	errUnknownRole prometheus.Counter
	errInvalid     prometheus.Counter
	errNotReady    prometheus.Counter
	errTooLarge    prometheus.Counter
}

// NewMetrics creates the dispatcher's metrics and registers them with reg;
// a nil reg keeps them unregistered (counted, never exported).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.bookings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "bookings_total",
		Help: "Bookings handled, by role and outcome (hinted, no_actions, not_hint_capable, unknown_worker, not_in_pool).",
	}, []string{"role", "outcome"})
	m.bookingErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "booking_errors_total",
		Help: "Bookings refused, by reason (unknown_role, invalid, not_ready, too_large).",
	}, []string{"reason"})
	m.buildSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: MetricsNamespace, Name: "hint_build_duration_seconds",
		Help: "Time to run a role's hint policies for one booking, by role.",
		// 1 µs to about 16 ms: the budget is microseconds, a policy deadline is 1 ms.
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 15),
	}, []string{"role"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "actions_total",
		Help: "Actions kept in hints, by role, policy (name or type) and policy type.",
	}, []string{"role", "policy", "policy_type"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "policy_failures_total",
		Help: "Policy runs whose actions were all dropped, by role, policy, policy type and reason (error, panic, deadline: not returned by the hard deadline, malformed).",
	}, []string{"role", "policy", "policy_type", "reason"})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "actions_dropped_total",
		Help: "Actions dropped, by role, policy, policy type and reason (malformed, over_limit; error, panic and abandoned runs return none).",
	}, []string{"role", "policy", "policy_type", "reason"})

	m.copiesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "kv_copies_dropped_total",
		Help: "Committed KV copies dropped before the policies ran (only the kv.fetch is lost), by role and reason (unknown_source, unknown_source_rank).",
	}, []string{"role", "reason"})

	m.iso = newIsolationMetrics(reg)

	m.configInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: MetricsNamespace, Name: "config_info",
		Help: "1 for the hash of the hints config in force.",
	}, []string{"hash"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "config_reloads_total",
		Help: "Config loads, by result: success, or failure (counted once per distinct refused document or source error).",
	}, []string{"result"})
	m.lastReloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: MetricsNamespace, Name: "config_last_reload_successful",
		Help: "1 if the last config load succeeded, 0 if it failed and the previous config is kept.",
	})
	m.lastReloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: MetricsNamespace, Name: "config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful config load.",
	})
	m.lastReloadFailure = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: MetricsNamespace, Name: "config_last_reload_failure_timestamp_seconds",
		Help: "Unix time of the last failed config load.",
	})
	if reg != nil {
		reg.MustRegister(m.bookings, m.bookingErrors, m.buildSeconds, m.actions, m.failures, m.dropped, m.copiesDropped,
			m.configInfo, m.reloads, m.lastReloadOK, m.lastReloadSuccess, m.lastReloadFailure)
	}
	m.errUnknownRole = m.bookingErrors.WithLabelValues(bookingErrUnknownRole)
	m.errInvalid = m.bookingErrors.WithLabelValues(bookingErrInvalid)
	m.errNotReady = m.bookingErrors.WithLabelValues(bookingErrNotReady)
	m.errTooLarge = m.bookingErrors.WithLabelValues(bookingErrTooLarge)
	return m
}

// roleMetrics are one role's pre-resolved series.
type roleMetrics struct {
	hinted, noActions, notCapable, unknownWorker, notInPool prometheus.Counter
	build                                                   prometheus.Observer
	copyDropped                                             [numCopyDrops]prometheus.Counter
}

func (m *Metrics) forRole(role string) roleMetrics {
	rm := roleMetrics{
		hinted:        m.bookings.WithLabelValues(role, outcomeHinted),
		noActions:     m.bookings.WithLabelValues(role, outcomeNoActions),
		notCapable:    m.bookings.WithLabelValues(role, outcomeNotCapable),
		unknownWorker: m.bookings.WithLabelValues(role, outcomeUnknownWorker),
		notInPool:     m.bookings.WithLabelValues(role, outcomeNotInPool),
		build:         m.buildSeconds.WithLabelValues(role),
	}
	for r := CopyKept + 1; r < numCopyDrops; r++ {
		rm.copyDropped[r] = m.copiesDropped.WithLabelValues(role, r.String())
	}
	return rm
}

// hintMetrics are one policy instance's pre-resolved series.
type hintMetrics struct {
	actions  prometheus.Counter
	failures [numDropReasons]prometheus.Counter
	dropped  [numDropReasons]prometheus.Counter
}

func (m *Metrics) forHint(role, policy, policyType string) hintMetrics {
	hm := hintMetrics{actions: m.actions.WithLabelValues(role, policy, policyType)}
	for r := DropReason(0); r < numDropReasons; r++ {
		// A run that errs or panics returns no actions to count, nor does one
		// abandoned at its hard deadline; an action
		// dropped past the limit is no failure of its policy.
		if r != DropOverLimit {
			hm.failures[r] = m.failures.WithLabelValues(role, policy, policyType, r.String())
		}
		if r != DropError && r != DropPanic && r != DropDeadline {
			hm.dropped[r] = m.dropped.WithLabelValues(role, policy, policyType, r.String())
		}
	}
	return hm
}

// roleVecs are the metrics with a role label; hintVecs those with a
// policy instance's role, policy and policy_type labels. A metric added
// to either kind belongs in its list, so that a reload deletes its series.
func (m *Metrics) roleVecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.bookings.MetricVec, m.buildSeconds.MetricVec, m.copiesDropped.MetricVec}
}

func (m *Metrics) hintVecs() []*prometheus.MetricVec {
	return append([]*prometheus.MetricVec{m.actions.MetricVec, m.failures.MetricVec, m.dropped.MetricVec}, m.iso.vecs()...)
}

// forgetRemoved deletes the series of the roles and policy instances prev
// had and next has not, so that /metrics holds the series of the config in
// force and not of every config ever loaded: renaming policies on each
// reload must not grow the series without end. A booking still running on
// prev counts into series no longer exported.
func (m *Metrics) forgetRemoved(prev, next *snapshot) {
	for name, rr := range prev.roles {
		nr, kept := next.roles[name]
		if !kept {
			for _, v := range append(m.roleVecs(), m.hintVecs()...) {
				v.DeletePartialMatch(prometheus.Labels{"role": name})
			}
			continue
		}
		for _, h := range rr.hints {
			if !slices.ContainsFunc(nr.hints, func(n hintRun) bool { return n.id == h.id && n.hint.Type == h.hint.Type }) {
				for _, v := range m.hintVecs() {
					v.DeletePartialMatch(prometheus.Labels{"role": name, "policy": h.id, "policy_type": h.hint.Type})
				}
			}
		}
	}
}
