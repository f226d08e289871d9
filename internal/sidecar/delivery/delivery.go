// Package delivery posts hints to the workers that open a hint endpoint:
// one bounded Queue and sender per worker, a byte budget across them, the
// poster and its keep-alive connections (hintConn), and the dial-time
// address check. It registers the delivery metrics.
//
// It imports fasthttp, Prometheus, internal/ratelog, endpoint (the address
// checks) and pkg/dispatch (the metrics namespace); the registry knows it only
// through workers.Delivery, which the assembly adapts it to.
package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/ratelog"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
)

// Delivery defaults.
const (
	DefaultQueueSize       = 256
	DefaultDeliveryTimeout = 250 * time.Millisecond
	DefaultHintTTL         = 2 * time.Second
	// DefaultMaxQueuedBytes bounds the hints queued across all workers: at
	// the 4 KiB of a large hint, 16,384 of them, and a small part of the
	// 256 MiB config/router gives the sidecar.
	DefaultMaxQueuedBytes = 64 << 20
)

// Options configure a Delivery.
type Options struct {
	// QueueSize bounds each worker's Queue; when it is full the newest hint
	// is dropped and counted. 0 means DefaultQueueSize.
	QueueSize int
	// Timeout bounds one post, the dial and the TLS handshake of a new
	// connection included. 0 means DefaultDeliveryTimeout.
	Timeout time.Duration
	// HintTTL is how long a hint may wait in its Queue: an older one is
	// dropped unsent, since its request has most likely started without it.
	// 0 means DefaultHintTTL.
	HintTTL time.Duration
	// MaxQueuedBytes bounds the bytes of the hints waiting in all the
	// queues together; a hint that would pass it is dropped and counted.
	// 0 means DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// DialControl checks the address every connection to a worker is
	// about to connect to, once its name is resolved (net.Dialer.Control):
	// the sidecar's endpoint.Policy.CheckDial. Nil applies
	// endpoint.CheckDialAddress, the rules that hold whatever the policy.
	DialControl func(network, address string, c syscall.RawConn) error
	// MaxConns bounds the connections open to all workers together, dials
	// included; 0 means DefaultMaxWorkerConns. The assembly lowers it to
	// what the descriptor limit leaves (ConnLimit).
	MaxConns int
	// Metrics receives delivery metrics; nil creates a private set.
	Metrics *Metrics
	// Log receives delivery errors, rate-limited per worker.
	Log logr.Logger
}

// Delivery posts hints to workers: one bounded Queue and one sender goroutine
// per hint-capable worker, so a slow or dead worker fills only its own Queue
// and never holds a booking. The sender posts each hint itself, one at a
// time, over its worker's keep-alive connection (see poster). Failed posts
// are counted, never retried: a hint is only useful before its request
// runs.
type Delivery struct {
	opts    Options
	metrics *Metrics
	log     logr.Logger

	// base is the context of every post; cancelled when a drain overruns.
	base       context.Context
	cancelBase context.CancelFunc
	closing    chan struct{}
	closed     atomic.Bool
	wg         sync.WaitGroup
	// queuedBytes are the bytes of the hints queued or in flight, across
	// every Queue; MaxQueuedBytes bounds it. queues counts the running
	// senders, among which the budget is shared.
	queuedBytes atomic.Int64
	queues      atomic.Int64
	// conns bounds the connections open to workers (connbudget.go).
	conns connBudget

	// send posts one hint; tests and the benchmark replace it to take the
	// network out of the measurement.
	send func(q *Queue, it queued)
	// tlsRoots, when set, replace the system roots for https:// workers;
	// tests set it before they add a Queue.
	tlsRoots *x509.CertPool

	// live are the queues of the workers registered now.
	mu   sync.Mutex
	live map[*Queue]struct{}
	// clients are the HTTP clients by endpoint, shared by the queues of
	// that endpoint and kept, parked, when none is left (at most
	// maxParkedClients of them).
	clients map[string]*sharedClient
	parked  int
	// retired are the times clients were dropped, oldest first, for as
	// long as their cleaner goroutines may still run (cleanerLife).
	retired []time.Time
	// maxParked and maxRetired are maxParkedClients and
	// maxRetiredClients; tests lower them.
	maxParked, maxRetired int
}

// sharedClient is the client of one endpoint and how many queues use it.
type sharedClient struct {
	hc   *fasthttp.HostClient
	refs int
}

// maxParkedClients bounds the clients kept for endpoints no queue uses.
// fasthttp's client keeps a goroutine asleep for the idle timeout (90 s)
// after its last connection, and nothing wakes it: a client made per
// worker cost a goroutine per removed worker for 90 s (29,765 after
// 30,000 add-book-remove cycles). A queue takes its endpoint's client
// instead, so workers that come and go at one endpoint cost one client.
const maxParkedClients = 1024

// maxRetiredClients bounds the clients dropped (past maxParkedClients)
// whose cleaner goroutines may still be asleep: workers that come and go
// each at an endpoint of its own (30,000 paths on one server left 29,491
// goroutines and 236 MiB RSS). While that many were dropped within
// cleanerLife, a new endpoint's client posts with "Connection: close": a
// dial per hint, and no cleaner, so no goroutine outlives its queue.
const maxRetiredClients = 1024

// cleanerLife bounds how long a dropped client's cleaner runs: a dial of
// a post that gave up may still pool a connection up to the post timeout
// after the drop, and the cleaner closes it, and ends, at most maxIdle
// after that (one second more for its wake-up).
func (d *Delivery) cleanerLife() time.Duration { return d.opts.Timeout + maxIdle + time.Second }

// shareClient returns the client of endpoint: the one another queue uses
// or left, else hc, which becomes it. keepAlive is false when hc is not
// kept for the endpoint because maxRetiredClients were dropped lately:
// the caller then posts with "Connection: close".
func (d *Delivery) shareClient(endpoint string, hc *fasthttp.HostClient, now time.Time) (_ *fasthttp.HostClient, keepAlive bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.clients == nil {
		d.clients = map[string]*sharedClient{}
	}
	if sc, ok := d.clients[endpoint]; ok {
		if sc.refs == 0 {
			d.parked--
		}
		sc.refs++
		// Each queue keeps its own allowance of connections: a sender
		// must not wait behind the others for the client's.
		sc.hc.SetMaxConns(MaxConnsPerWorker * sc.refs)
		return sc.hc, true
	}
	if d.retiredLocked(now) >= d.maxRetired {
		return hc, false
	}
	d.clients[endpoint] = &sharedClient{hc: hc, refs: 1}
	return hc, true
}

// retiredLocked forgets the dropped clients whose cleaners have ended and
// returns how many may still run. Callers hold d.mu.
func (d *Delivery) retiredLocked(now time.Time) int {
	life := d.cleanerLife()
	i := 0
	for i < len(d.retired) && now.Sub(d.retired[i]) > life {
		i++
	}
	if i > 0 {
		d.retired = append(d.retired[:0], d.retired[i:]...)
	}
	return len(d.retired)
}

// releaseClient gives back a queue's client: its idle connections are
// closed, and it is parked for the endpoint's next queue, or dropped when
// maxParkedClients are parked already. A client made without keep-alive
// was never kept and has no cleaner: nothing to do but close.
func (d *Delivery) releaseClient(q *Queue) {
	q.p.close()
	if q.p.hc == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sc, ok := d.clients[q.endpoint]
	if !ok || sc.hc != q.p.hc {
		return
	}
	sc.refs--
	sc.hc.SetMaxConns(MaxConnsPerWorker * max(1, sc.refs))
	if sc.refs > 0 {
		return
	}
	if d.parked >= d.maxParked {
		delete(d.clients, q.endpoint)
		d.retired = append(d.retired, time.Now())
		return
	}
	d.parked++
}

// New returns a running Delivery; Close drains it.
func New(o Options) *Delivery {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDeliveryTimeout
	}
	if o.HintTTL <= 0 {
		o.HintTTL = DefaultHintTTL
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxWorkerConns
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if o.DialControl == nil {
		o.DialControl = endpoint.CheckDialAddress
	}
	d := &Delivery{opts: o, metrics: o.Metrics, log: o.Log, closing: make(chan struct{}), live: make(map[*Queue]struct{}),
		maxParked: maxParkedClients, maxRetired: maxRetiredClients}
	d.conns.limit = int64(o.MaxConns)
	d.conns.sweep = d.sweepIdle
	d.conns.log = o.Log
	d.conns.logLimit.Interval = failureLogInterval
	o.Metrics.observe(d)
	d.base, d.cancelBase = context.WithCancel(context.Background())
	d.send = (*Queue).post
	return d
}

// MaxConnsPerWorker caps the connections open to one worker, dials and TLS
// handshakes included. A worker has one sender, which posts one hint at a
// time, so it has one connection in use; the cap holds whatever fasthttp
// does while a connection closes. A post that finds it reached waits for a
// connection within its own timeout instead of dialling more.
const MaxConnsPerWorker = 2

// queued is one hint waiting for its post.
type queued struct {
	msg []byte
	at  time.Time
}

// Queue is one worker's bounded queue and sender.
type Queue struct {
	d        *Delivery
	worker   string
	endpoint string
	ch       chan queued
	stop     chan struct{}
	stopped  atomic.Bool
	errLog   ratelog.Limiter
	// bytes are this worker's part of Delivery.queuedBytes.
	bytes atomic.Int64
	// drops are the worker's series of worker_hints_dropped_total.
	drops workerDrops
	// p posts the hints; only the sender uses it.
	p *poster
}

// NewQueue starts a sender for a worker's endpoint.
func (d *Delivery) NewQueue(worker, endpoint string) *Queue {
	q := &Queue{d: d, worker: worker, endpoint: endpoint, ch: make(chan queued, d.opts.QueueSize), stop: make(chan struct{})}
	q.errLog.Interval = failureLogInterval
	d.mu.Lock()
	d.live[q] = struct{}{}
	d.mu.Unlock()
	q.drops = d.metrics.forWorker(worker)
	q.p = newPoster(d.base, endpoint, d.opts.Timeout, d.tlsRoots, d.opts.DialControl)
	q.p.conns = &d.conns
	if q.p.hc != nil {
		var keepAlive bool
		if q.p.hc, keepAlive = d.shareClient(endpoint, q.p.hc, time.Now()); !keepAlive {
			q.p.req.SetConnectionClose()
		}
	}
	d.wg.Add(1)
	d.queues.Add(1)
	go q.run()
	return q
}

// drop counts a hint dropped for reason, in total and for the worker.
func (q *Queue) drop(r dropReason) {
	q.d.metrics.drops[r].Inc()
	if c := q.drops[r]; c != nil {
		c.Inc()
	}
}

// Enqueue hands a hint to the sender without waiting. When the Queue is
// full the newest hint, this one, is dropped: the queued ones are older and
// closer to their requests. So is a hint that would take the bytes queued
// across all workers past the budget, or this worker's past its fair share
// of it (the budget over the number of queues): a few stalled workers must
// not fill the sidecar's memory with hints nobody will read in time, nor
// take the room of the workers that answer.
func (q *Queue) Enqueue(msg []byte, now time.Time) bool {
	if q.d.closed.Load() {
		q.drop(dropReasonShutdown)
		return false
	}
	if q.stopped.Load() {
		q.drop(dropReasonStale)
		return false
	}
	n := int64(len(msg))
	// A worker's fair share of the budget: stalled workers must not take
	// it all and starve the healthy ones. A worker holding nothing may
	// always Queue one hint.
	share := q.d.opts.MaxQueuedBytes / max(1, q.d.queues.Load())
	if mine := q.bytes.Add(n); mine > share && mine != n {
		q.bytes.Add(-n)
		q.drop(dropReasonBudget)
		return false
	}
	if q.d.queuedBytes.Add(n) > q.d.opts.MaxQueuedBytes {
		q.d.queuedBytes.Add(-n)
		q.bytes.Add(-n)
		q.drop(dropReasonBudget)
		return false
	}
	select {
	case q.ch <- queued{msg: msg, at: now}:
		if q.stopped.Load() {
			// The sender stopped meanwhile and may have emptied the Queue
			// already: nobody else would release these bytes.
			q.discard(dropReasonStale)
			return false
		}
		return true
	default:
		q.d.queuedBytes.Add(-n)
		q.bytes.Add(-n)
		q.drop(dropReasonFull)
		return false
	}
}

// done gives a hint's bytes back to the budget, once it is sent or dropped.
func (q *Queue) done(it queued) {
	n := int64(len(it.msg))
	q.bytes.Add(-n)
	q.d.queuedBytes.Add(-n)
}

// Close stops the sender of a worker that left the registry; the hints
// still queued for it are dropped and counted as stale, and so is one a
// booking that looked the worker up just before enqueues afterwards.
func (q *Queue) Close() {
	q.d.mu.Lock()
	delete(q.d.live, q)
	q.d.mu.Unlock()
	q.stopped.Store(true)
	close(q.stop)
}

// Len is the number of hints waiting in the queue.
func (q *Queue) Len() int { return len(q.ch) }

// QueuedHints counts the hints waiting in the queues of the workers
// registered now.
func (d *Delivery) QueuedHints() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for q := range d.live {
		n += q.Len()
	}
	return n
}

// NoEndpoint counts a hint dropped because its worker advertises
// router_hint but no endpoint.
func (d *Delivery) NoEndpoint() { d.metrics.drops[dropReasonNoEndpoint].Inc() }

// Forget drops the per-worker series of a worker that left the registry.
func (d *Delivery) Forget(worker string) { d.metrics.forgetWorker(worker) }

func (q *Queue) run() {
	defer q.d.wg.Done()
	defer q.d.queues.Add(-1)
	defer q.d.releaseClient(q)
	for {
		select {
		case it := <-q.ch:
			q.d.send(q, it)
			q.done(it)
		case <-q.stop:
			q.discard(dropReasonStale)
			return
		case <-q.d.closing:
			q.drain()
			return
		}
	}
}

// drain posts what is queued until the Queue is empty or the drain deadline
// cancels the base context; what is left then is counted as dropped.
func (q *Queue) drain() {
	for {
		select {
		case it := <-q.ch:
			if q.d.base.Err() != nil {
				q.drop(dropReasonShutdown)
			} else {
				q.d.send(q, it)
			}
			q.done(it)
		default:
			return
		}
	}
}

func (q *Queue) discard(r dropReason) {
	for {
		select {
		case it := <-q.ch:
			q.drop(r)
			q.done(it)
		default:
			return
		}
	}
}

// post sends one hint, once.
func (q *Queue) post(it queued) {
	m := q.d.metrics
	if time.Since(it.at) > q.d.opts.HintTTL {
		q.drop(dropReasonStale)
		return
	}
	start := time.Now()
	code, err := q.p.post(it.msg)
	if err != nil {
		switch {
		case q.d.base.Err() != nil:
			// Cut short by a drain past its deadline, not the worker's fault.
			q.drop(dropReasonShutdown)
			return
		case errors.Is(err, errConnLimit):
			// The sidecar's limit, not the worker's fault: the budget logs
			// it, rate-limited across all workers.
			m.errConnLimit.Inc()
			return
		case isTimeout(err):
			m.errTimeout.Inc()
		default:
			m.errTransport.Inc()
		}
		q.logError(err, "Hint post failed; not retried")
		return
	}
	m.deliverySeconds.Observe(time.Since(start).Seconds())
	if code < 200 || code > 299 {
		m.errStatus.Inc()
		q.logError(fmt.Errorf("%d %s", code, fasthttp.StatusMessage(code)), "Worker refused a hint; not retried")
		return
	}
	m.hintsSent.Inc()
}

// poster posts one Queue's hints to its worker through a fasthttp
// HostClient. Only the Queue's sender calls it, from its own goroutine, one
// hint at a time: no goroutine of the client's stands between the sender
// and the socket, and the worker sees one keep-alive connection. The
// poster reuses one Request and one Response and sets the hint as the raw
// body, so a post over an open connection allocates nothing.
//
// A hint is posted once. fasthttp resends only idempotent requests, and a
// POST is not; resendUnwritten makes the one exception, a request that
// provably never left (see hintConn). The post timeout bounds the whole
// post: the wait for a connection, the dial (dialHint), the TLS handshake
// (HostClient.WriteTimeout, without which fasthttp leaves a handshake
// unbounded), the request and the answer. The answer is read to its end,
// at most maxAnswerBytes of it, so that the connection is kept; a larger
// one, or one cut short after its head, closes the connection but counts
// by its status. A connection the worker marks "Connection: close", or an
// HTTP/1.0 one, is not reused; one idle for maxIdle is closed.
type poster struct {
	hc      *fasthttp.HostClient
	req     *fasthttp.Request
	resp    *fasthttp.Response
	timeout time.Duration
	// err is a bad endpoint's: every post fails with it.
	err error
	// conns is the budget of the connections to all workers; nil is no
	// bound (tests).
	conns *connBudget
}

const (
	// maxAnswerBytes is how much of a worker's answer is read to keep the
	// connection; past it the connection is closed.
	maxAnswerBytes = 64 << 10
	// probeIdle is how long a connection may sit idle before it is checked
	// for a close by the worker before reuse.
	probeIdle = 100 * time.Millisecond
	// maxIdle is how long a connection may sit idle and still be reused.
	maxIdle = 90 * time.Second
	// userAgent names the sidecar to workers.
	userAgent = "kvhint-sidecar"
)

// newPoster returns the poster of an endpoint. The scheme is read with
// net/url, so HTTP:// and HTTPS:// work: fasthttp refuses a request whose
// scheme, as it spells it, differs from its HostClient's. Connections are
// tied to base, which cuts them short when it is cancelled, and dialled
// through control (see dialHint). roots nil means the system roots.
func newPoster(base context.Context, rawURL string, timeout time.Duration, roots *x509.CertPool, control dialControl) *poster {
	p := &poster{timeout: timeout}
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		p.err = err
		return p
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		p.err = fmt.Errorf("hint endpoint %s is not an http:// or https:// URL", endpoint.Shown(rawURL))
		return p
	}
	isTLS := u.Scheme == "https"
	port := u.Port()
	if port == "" {
		port = "80"
		if isTLS {
			port = "443"
		}
	}
	p.hc = &fasthttp.HostClient{
		Addr: net.JoinHostPort(u.Hostname(), port),
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			// A post dials with what is left of its timeout. A dial for a
			// post that waited for a connection comes with none, and may
			// outlive that post: the post timeout bounds it.
			if timeout <= 0 {
				timeout = p.timeout
			}
			if p.conns == nil {
				return dialHint(base, addr, timeout, control)
			}
			if !p.conns.acquire() {
				return nil, errConnLimit
			}
			c, err := dialHint(base, addr, timeout, control)
			if err != nil {
				p.conns.release()
				return nil, err
			}
			c.release = p.conns.release
			return c, nil
		},
		IsTLS:                     isTLS,
		MaxConns:                  MaxConnsPerWorker,
		MaxConnWaitTimeout:        timeout,
		MaxIdleConnDuration:       maxIdle,
		MaxIdemponentCallAttempts: 2,
		RetryIfErr:                resendUnwritten,
		WriteTimeout:              timeout,
		MaxResponseBodySize:       maxAnswerBytes,
		WriteBufferSize:           8 << 10, // a large hint (4 KiB) and its head in one write
		NoDefaultUserAgentHeader:  true,
		DisablePathNormalizing:    true,
	}
	if isTLS {
		p.hc.TLSConfig = &tls.Config{ServerName: u.Hostname(), RootCAs: roots}
	}
	p.req = new(fasthttp.Request)
	p.req.Header.SetMethod(fasthttp.MethodPost)
	p.req.SetRequestURI(u.String())
	p.req.Header.SetContentType("application/json")
	p.req.Header.SetUserAgent(userAgent)
	p.resp = new(fasthttp.Response)
	return p
}

// post sends msg and returns the worker's status. An answer whose head
// arrived counts by its status even if its body did not (too large, cut
// short): fasthttp has closed that connection already.
func (p *poster) post(msg []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	p.req.SetBodyRaw(msg)
	// Do may fail before it resets resp; an answer to the previous post
	// must not pass for this one's.
	p.resp.Reset()
	err := p.hc.DoTimeout(p.req, p.resp, p.timeout)
	p.req.ResetBody() // the hint is not the poster's to keep
	if p.conns != nil && p.conns.pressed() {
		// Connections are scarce: this one goes back to the budget now,
		// not after sitting idle for the worker's next hint.
		p.hc.CloseIdleConnections()
	}
	if err != nil && !headRead(p.resp, err) {
		return 0, err
	}
	return p.resp.StatusCode(), nil
}

// headRead reports whether a failed post's answer had its head read, so
// that its status stands. fasthttp resets the head when reading it fails,
// leaving Content-Length 0, and reads a body only when the head announces
// one: a length over 0, chunked (-1) or up to the close (-2, then the bytes
// read; a close-delimited body that fails before its first byte is taken
// for a failed head).
func headRead(resp *fasthttp.Response, err error) bool {
	return errors.Is(err, fasthttp.ErrBodyTooLarge) || resp.Header.ContentLength() != 0
}

// close closes the idle connections; the sender is done with the poster.
// The HostClient's cleaner goroutine sleeps on until maxIdle after its last
// use, and a dial still running for a post that gave up is closed by it;
// the Delivery keeps the client for the endpoint's next queue
// (shareClient), so that a worker that leaves does not leave a goroutine
// per worker.
func (p *poster) close() {
	if p.hc != nil {
		p.hc.CloseIdleConnections()
	}
}

// resendUnwritten is the posters' retry rule: a request goes out again only
// if the connection it was to go out on was found closed by the worker
// before a byte was written (errIdleConnClosed), and only once. Any other
// failure may have reached the worker, and a hint is posted at most once.
func resendUnwritten(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	return false, attempts == 1 && errors.Is(err, errIdleConnClosed)
}

// isTimeout reports whether err is a timeout: a network one, fasthttp's
// ErrTimeout (no net.Error) or its TLS handshake timeout (no Timeout method).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) || (errors.As(err, &t) && t.Timeout())
}

// failureLogInterval is the least time between two logs of one worker's
// delivery errors; every error is counted regardless.
const failureLogInterval = 10 * time.Second

// logError logs a delivery error at most once per failureLogInterval per
// worker; the metrics count every one.
func (q *Queue) logError(err error, msg string) {
	q.errLog.Error(q.d.log, err, msg, "worker", q.worker, "endpoint", q.endpoint,
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
