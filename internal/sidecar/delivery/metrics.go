package delivery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
)

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
	deliveryErrConnLimit = "connection_limit"
)

// Metrics are delivery's Prometheus metrics.
type Metrics struct {
	reg *prometheus.Registry

	hintsSent       prometheus.Counter
	hintsDropped    *prometheus.CounterVec
	deliveryErrors  *prometheus.CounterVec
	deliverySeconds prometheus.Histogram
	workerDropped   *prometheus.CounterVec
	drops           [numDropReasons]prometheus.Counter

	errTimeout   prometheus.Counter
	errTransport prometheus.Counter
	errStatus    prometheus.Counter
	errConnLimit prometheus.Counter
}

// NewMetrics registers delivery's metrics in reg; the gauges of the queues
// follow when a Delivery is created with them.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	ns := dispatchmetrics.Namespace
	m := &Metrics{reg: reg}
	m.hintsSent = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "hints_sent_total",
		Help: "Hints a worker accepted with a 2xx answer.",
	})
	m.hintsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "hints_dropped_total",
		Help: "Hints never sent, by reason (queue_full, stale, no_endpoint, shutdown, memory_budget).",
	}, []string{"reason"})
	m.workerDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "worker_hints_dropped_total",
		Help: "Hints never sent, by worker and reason (queue_full, stale, shutdown, memory_budget); a worker's series go when it leaves the registry.",
	}, []string{"worker", "reason"})
	m.deliveryErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "delivery_errors_total",
		Help: "Hint posts that failed, by reason (timeout, transport, status, connection_limit: no connection left in --max-worker-connections). Failed hints are not retried.",
	}, []string{"reason"})
	m.deliverySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "delivery_duration_seconds",
		Help:    "Time from the start of a hint post to the worker's answer.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
	})
	reg.MustRegister(m.hintsSent, m.hintsDropped, m.deliveryErrors, m.deliverySeconds, m.workerDropped)
	for r := range numDropReasons {
		m.drops[r] = m.hintsDropped.WithLabelValues(r.String())
	}
	m.errTimeout = m.deliveryErrors.WithLabelValues(deliveryErrTimeout)
	m.errTransport = m.deliveryErrors.WithLabelValues(deliveryErrTransport)
	m.errStatus = m.deliveryErrors.WithLabelValues(deliveryErrStatus)
	m.errConnLimit = m.deliveryErrors.WithLabelValues(deliveryErrConnLimit)
	return m
}

// observe adds the gauges read from d at scrape time.
func (m *Metrics) observe(d *Delivery) {
	ns := dispatchmetrics.Namespace
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "delivery_queued_bytes",
			Help: "Bytes of the hints queued or in flight across all workers; bounded by --max-queued-hint-bytes.",
		}, func() float64 { return float64(d.queuedBytes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "worker_connections",
			Help: "Connections open to workers, dials included; bounded by worker_connections_limit.",
		}, func() float64 { return float64(d.conns.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "worker_connections_limit",
			Help: "The budget of connections to all workers: --max-worker-connections, lowered to what the descriptor limit leaves after the listeners' caps.",
		}, func() float64 { return float64(d.conns.limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "delivery_queued_hints",
			Help: "Hints waiting in the workers' delivery queues.",
		}, func() float64 { return float64(d.QueuedHints()) }),
	)
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
