package router

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"
)

const metricsNamespace = core.MetricsNamespace

// dropReason is why a hint was never sent: the reason label of
// hints_dropped_total and worker_hints_dropped_total.
type dropReason int

const (
	dropReasonFull       dropReason = iota // the worker's queue was full: newest dropped
	dropReasonStale                        // the hint waited longer than its TTL, or its worker left
	dropReasonNoEndpoint                   // the worker advertises router_hint but no endpoint
	dropReasonShutdown                     // still queued when the drain deadline passed
	dropReasonBudget                       // the queues held MaxQueuedBytes already
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{"queue_full", "stale", "no_endpoint", "shutdown", "memory_budget"}

func (r dropReason) String() string { return dropReasonNames[r] }

// Delivery errors, the reason label of delivery_errors_total.
const (
	deliveryErrTimeout   = "timeout"
	deliveryErrTransport = "transport"
	deliveryErrStatus    = "status"
)

// Metrics are the sidecar's Prometheus metrics, in their own registry so
// that tests can run many sidecars in one process: the dispatcher's, and
// delivery's below.
type Metrics struct {
	// Registry holds every metric below plus the Go and process collectors.
	Registry *prometheus.Registry
	// Dispatch are the dispatcher's metrics, registered in Registry.
	Dispatch *core.Metrics

	hintsSent       prometheus.Counter
	hintsDropped    *prometheus.CounterVec
	deliveryErrors  *prometheus.CounterVec
	deliverySeconds prometheus.Histogram
	workersRefused  *prometheus.CounterVec
	connsRefused    *prometheus.CounterVec
	workerDropped   *prometheus.CounterVec
	drops           [numDropReasons]prometheus.Counter

	dropFull     prometheus.Counter
	dropStale    prometheus.Counter
	dropNoEP     prometheus.Counter
	dropShut     prometheus.Counter
	dropBudget   prometheus.Counter
	errTimeout   prometheus.Counter
	errTransport prometheus.Counter
	errStatus    prometheus.Counter
}

// NewMetrics creates the metrics in a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	m.Dispatch = core.NewMetrics(m.Registry)
	m.hintsSent = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "hints_sent_total",
		Help: "Hints a worker accepted with a 2xx answer.",
	})
	m.hintsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "hints_dropped_total",
		Help: "Hints never sent, by reason (queue_full, stale, no_endpoint, shutdown, memory_budget).",
	}, []string{"reason"})
	m.workerDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "worker_hints_dropped_total",
		Help: "Hints never sent, by worker and reason (queue_full, stale, shutdown, memory_budget); a worker's series go when it leaves the registry.",
	}, []string{"worker", "reason"})
	m.deliveryErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "delivery_errors_total",
		Help: "Hint posts that failed, by reason (timeout, transport, status). Failed hints are not retried.",
	}, []string{"reason"})
	m.deliverySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Name: "delivery_duration_seconds",
		Help:    "Time from the start of a hint post to the worker's answer.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
	})

	m.workersRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "workers_refused_total",
		Help: "Worker registrations refused as invalid (a worker type other than aggregated, prefill or decode, bad source endpoints, a bad hint endpoint), by source (api, file, pods).",
	}, []string{"source"})

	m.connsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "connections_refused_total",
		Help: "Connections answered 503 and closed because their listener (booking, ops, pprof) had its cap open.",
	}, []string{"listener"})

	for _, c := range []prometheus.Collector{
		m.hintsSent, m.hintsDropped, m.deliveryErrors, m.deliverySeconds, m.workersRefused, m.connsRefused, m.workerDropped,
	} {
		f(c)
	}

	for r := range numDropReasons {
		m.drops[r] = m.hintsDropped.WithLabelValues(r.String())
	}
	m.dropFull = m.drops[dropReasonFull]
	m.dropStale = m.drops[dropReasonStale]
	m.dropNoEP = m.drops[dropReasonNoEndpoint]
	m.dropShut = m.drops[dropReasonShutdown]
	m.dropBudget = m.drops[dropReasonBudget]
	m.errTimeout = m.deliveryErrors.WithLabelValues(deliveryErrTimeout)
	m.errTransport = m.deliveryErrors.WithLabelValues(deliveryErrTransport)
	m.errStatus = m.deliveryErrors.WithLabelValues(deliveryErrStatus)
	return m
}

// observeRegistry adds the gauges read from the registry at scrape time.
func (m *Metrics) observeRegistry(r *Registry) {
	r.refused = m.workersRefused
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "workers",
			Help: "Workers in the registry.",
		}, func() float64 { n, _ := r.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "hint_capable_workers",
			Help: "Workers in the registry that advertise router_hint.",
		}, func() float64 { _, n := r.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "delivery_queued_bytes",
			Help: "Bytes of the hints queued or in flight across all workers; bounded by --max-queued-hint-bytes.",
		}, func() float64 {
			if r.delivery == nil {
				return 0
			}
			return float64(r.delivery.queuedBytes.Load())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "delivery_queued_hints",
			Help: "Hints waiting in the workers' delivery queues.",
		}, func() float64 { return float64(r.QueuedHints()) }),
	)
}

// observeListener adds the open-connections gauge of a capped listener and
// creates its refusal series, so that both read 0 before any traffic.
func (m *Metrics) observeListener(name string, l *capListener) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "open_connections",
		Help:        "Connections open on a listener (booking, ops, pprof); capped by --max-booking-connections and --max-ops-connections.",
		ConstLabels: prometheus.Labels{"listener": name},
	}, func() float64 { return float64(l.Open()) }))
}

// workerDrops are one worker's series of worker_hints_dropped_total.
type workerDrops [numDropReasons]prometheus.Counter

// forWorker resolves a worker's drop series. no_endpoint is never counted
// per worker: such a worker has no queue.
func (m *Metrics) forWorker(worker string) workerDrops {
	var d workerDrops
	for r := range numDropReasons {
		if r != dropReasonNoEndpoint {
			d[r] = m.workerDropped.WithLabelValues(worker, r.String())
		}
	}
	return d
}

// forgetWorker deletes the series of a worker that left the registry, so
// that their number stays bounded by the registry's size. A sender still
// discarding the worker's hints counts them only in the totals.
func (m *Metrics) forgetWorker(worker string) {
	m.workerDropped.DeletePartialMatch(prometheus.Labels{"worker": worker})
}
