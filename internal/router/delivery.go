package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Delivery defaults.
const (
	DefaultQueueSize       = 256
	DefaultDeliveryTimeout = 250 * time.Millisecond
	DefaultHintTTL         = 2 * time.Second
)

// DeliveryOptions configure a Delivery.
type DeliveryOptions struct {
	// QueueSize bounds each worker's queue; when it is full the newest hint
	// is dropped and counted. 0 means DefaultQueueSize.
	QueueSize int
	// Timeout bounds one post, connection included. 0 means
	// DefaultDeliveryTimeout.
	Timeout time.Duration
	// HintTTL is how long a hint may wait in its queue: an older one is
	// dropped unsent, since its request has most likely started without it.
	// 0 means DefaultHintTTL.
	HintTTL time.Duration
	// Client posts the hints; nil uses one tuned for many small posts over
	// keep-alive connections (see NewHintClient).
	Client *http.Client
	// Metrics receives delivery metrics; nil creates a private set.
	Metrics *Metrics
	// Log receives delivery errors, rate-limited per worker.
	Log logr.Logger
}

// Delivery posts hints to workers: one bounded queue and one sender goroutine
// per hint-capable worker, so a slow or dead worker fills only its own queue
// and never holds a booking. Failed posts are counted, never retried: a hint
// is only useful before its request runs.
type Delivery struct {
	opts    DeliveryOptions
	client  *http.Client
	metrics *Metrics
	log     logr.Logger

	// base is the context of every post; cancelled when a drain overruns.
	base       context.Context
	cancelBase context.CancelFunc
	closing    chan struct{}
	closed     atomic.Bool
	wg         sync.WaitGroup

	// send posts one hint; tests and the benchmark replace it to take the
	// network out of the measurement.
	send func(q *queue, it queued)
}

// NewDelivery returns a running Delivery; Close drains it.
func NewDelivery(o DeliveryOptions) *Delivery {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDeliveryTimeout
	}
	if o.HintTTL <= 0 {
		o.HintTTL = DefaultHintTTL
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Client == nil {
		o.Client = NewHintClient(o.Timeout)
	}
	d := &Delivery{opts: o, client: o.Client, metrics: o.Metrics, log: o.Log, closing: make(chan struct{})}
	d.base, d.cancelBase = context.WithCancel(context.Background())
	d.send = (*queue).post
	return d
}

// NewHintClient returns an HTTP client for hint posts: plain HTTP/1.1
// keep-alive (a small post over an open connection beats h2 framing on
// loopback and pod networks), no proxy (hint endpoints are in-cluster), no
// compression (payloads are a few KiB), and dial and header timeouts within
// the post timeout. Connections per worker stay few because each worker has
// one sender.
func NewHintClient(timeout time.Duration) *http.Client {
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	return &http.Client{Transport: t}
}

// queued is one hint waiting for its post.
type queued struct {
	msg []byte
	at  time.Time
}

// queue is one worker's bounded queue and sender.
type queue struct {
	d        *Delivery
	worker   string
	endpoint string
	ch       chan queued
	stop     chan struct{}
	lastLog  atomic.Int64
}

// newQueue starts a sender for a worker's endpoint.
func (d *Delivery) newQueue(worker, endpoint string) *queue {
	q := &queue{d: d, worker: worker, endpoint: endpoint, ch: make(chan queued, d.opts.QueueSize), stop: make(chan struct{})}
	d.wg.Add(1)
	go q.run()
	return q
}

// enqueue hands a hint to the sender without waiting. When the queue is
// full the newest hint, this one, is dropped: the queued ones are older and
// closer to their requests.
func (q *queue) enqueue(msg []byte, now time.Time) bool {
	if q.d.closed.Load() {
		q.d.metrics.dropShut.Inc()
		return false
	}
	select {
	case q.ch <- queued{msg: msg, at: now}:
		return true
	default:
		q.d.metrics.dropFull.Inc()
		return false
	}
}

// close stops the sender of a worker that left the registry; the hints
// still queued for it are dropped and counted as stale. A booking that
// looked the worker up just before may still enqueue one more: it stays
// unsent, which is what a hint for a departed worker deserves.
func (q *queue) close() { close(q.stop) }

func (q *queue) run() {
	defer q.d.wg.Done()
	for {
		select {
		case it := <-q.ch:
			q.d.send(q, it)
		case <-q.stop:
			q.discard(q.d.metrics.dropStale.Inc)
			return
		case <-q.d.closing:
			q.drain()
			return
		}
	}
}

// drain posts what is queued until the queue is empty or the drain deadline
// cancels the base context; what is left then is counted as dropped.
func (q *queue) drain() {
	for {
		select {
		case it := <-q.ch:
			if q.d.base.Err() != nil {
				q.d.metrics.dropShut.Inc()
				continue
			}
			q.d.send(q, it)
		default:
			return
		}
	}
}

func (q *queue) discard(count func()) {
	for {
		select {
		case <-q.ch:
			count()
		default:
			return
		}
	}
}

// post sends one hint, once.
func (q *queue) post(it queued) {
	m := q.d.metrics
	if time.Since(it.at) > q.d.opts.HintTTL {
		m.dropStale.Inc()
		return
	}
	ctx, cancel := context.WithTimeout(q.d.base, q.d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.endpoint, bytes.NewReader(it.msg))
	if err != nil {
		m.errTransport.Inc()
		q.logError(err, "Cannot build hint post")
		return
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := q.d.client.Do(req)
	if err != nil {
		switch {
		case q.d.base.Err() != nil:
			// Cut short by a drain past its deadline, not the worker's fault.
			m.dropShut.Inc()
			return
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			m.errTimeout.Inc()
		default:
			m.errTransport.Inc()
		}
		q.logError(err, "Hint post failed; not retried")
		return
	}
	// Read the (small) answer to the end so the connection goes back to the
	// pool; a worker that answers with megabytes gets its connection closed.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	m.deliverySeconds.Observe(time.Since(start).Seconds())
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		m.errStatus.Inc()
		q.logError(errors.New(resp.Status), "Worker refused a hint; not retried")
		return
	}
	m.hintsSent.Inc()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// logError logs a delivery error at most once per failureLogInterval per
// worker; the metrics count every one.
func (q *queue) logError(err error, msg string) {
	now := time.Now().UnixNano()
	last := q.lastLog.Load()
	if now-last < int64(failureLogInterval) || !q.lastLog.CompareAndSwap(last, now) {
		return
	}
	q.d.log.Error(err, msg, "worker", q.worker, "endpoint", q.endpoint,
		"note", "logged at most every "+failureLogInterval.String()+" per worker; see kvhint_router_delivery_errors_total")
}

// Close stops taking hints and posts what is queued until ctx is done; then
// it cancels the posts in flight and counts what is left as dropped. It
// returns ctx.Err() if the drain was cut short.
func (d *Delivery) Close(ctx context.Context) error {
	if d.closed.Swap(true) {
		return nil
	}
	close(d.closing)
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		d.cancelBase()
		return nil
	case <-ctx.Done():
		d.cancelBase()
		<-done
		return ctx.Err()
	}
}
