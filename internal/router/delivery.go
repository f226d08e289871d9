package router

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/internal/h1"
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
	// Client, when set, posts every hint. When nil, hints to http://
	// endpoints go out over the built-in HTTP/1.1 poster (one keep-alive
	// connection per worker, the request written in one piece, no
	// goroutines of its own), and hints to https:// endpoints through
	// NewHintClient.
	Client *http.Client
	// MaxQueuedBytes bounds the bytes of the hints waiting in all the
	// queues together; a hint that would pass it is dropped and counted.
	// 0 means DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
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
	// queuedBytes are the bytes of the hints queued or in flight, across
	// every queue; MaxQueuedBytes bounds it. queues counts the running
	// senders, among which the budget is shared.
	queuedBytes atomic.Int64
	queues      atomic.Int64

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
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	client := o.Client
	if client == nil {
		client = NewHintClient(o.Timeout)
	}
	d := &Delivery{opts: o, client: client, metrics: o.Metrics, log: o.Log, closing: make(chan struct{})}
	d.base, d.cancelBase = context.WithCancel(context.Background())
	d.send = (*queue).post
	return d
}

// NewHintClient returns an HTTP client for hint posts: plain HTTP/1.1
// keep-alive (a small post over an open connection beats h2 framing on
// loopback and pod networks), no proxy (hint endpoints are in-cluster), no
// compression (payloads are a few KiB), and dial, TLS handshake and header
// timeouts within the post timeout.
//
// The Transport finishes a dial it started even after the post that asked
// for it has given up, and a TLS handshake has no timeout of its own: a
// worker that accepts TCP and never answers the ClientHello would hold a
// descriptor and two goroutines per timed-out post, forever. So the
// handshake is bounded by the post timeout, and a worker gets at most
// MaxConnsPerWorker connections, dials included: a post that finds them
// all busy waits for one within its own timeout instead of dialling more.
func NewHintClient(timeout time.Duration) *http.Client {
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: checkDialAddress}).DialContext,
		TLSHandshakeTimeout:   timeout,
		MaxConnsPerHost:       MaxConnsPerWorker,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   MaxConnsPerWorker,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	return &http.Client{Transport: t}
}

// MaxConnsPerWorker caps the connections, dials and handshakes included,
// that the https:// client opens to one worker. Each worker has one
// sender, so one is in use at a time; the second covers a connection the
// worker is closing while the next post dials. The http:// poster keeps at
// most one.
const MaxConnsPerWorker = 2

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
	stopped  atomic.Bool
	lastLog  atomic.Int64
	// bytes are this worker's part of Delivery.queuedBytes.
	bytes atomic.Int64
	// drops are the worker's series of worker_hints_dropped_total.
	drops workerDrops
	// h1 posts to an http:// endpoint when no Client was given; nil means
	// d.client posts.
	h1 *h1Poster
}

// newQueue starts a sender for a worker's endpoint.
func (d *Delivery) newQueue(worker, endpoint string) *queue {
	q := &queue{d: d, worker: worker, endpoint: endpoint, ch: make(chan queued, d.opts.QueueSize), stop: make(chan struct{})}
	q.drops = d.metrics.forWorker(worker)
	if d.opts.Client == nil && !(len(endpoint) >= len("https://") && strings.EqualFold(endpoint[:len("https://")], "https://")) {
		q.h1 = newH1Poster(endpoint, d.opts.Timeout)
	}
	d.wg.Add(1)
	d.queues.Add(1)
	go q.run()
	return q
}

// drop counts a hint dropped for reason, in total and for the worker.
func (q *queue) drop(r dropReason) {
	q.d.metrics.drops[r].Inc()
	if c := q.drops[r]; c != nil {
		c.Inc()
	}
}

// enqueue hands a hint to the sender without waiting. When the queue is
// full the newest hint, this one, is dropped: the queued ones are older and
// closer to their requests. So is a hint that would take the bytes queued
// across all workers past the budget, or this worker's past its fair share
// of it (the budget over the number of queues): a few stalled workers must
// not fill the sidecar's memory with hints nobody will read in time, nor
// take the room of the workers that answer.
func (q *queue) enqueue(msg []byte, now time.Time) bool {
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
	// always queue one hint.
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
			// The sender stopped meanwhile and may have emptied the queue
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
func (q *queue) done(it queued) {
	n := int64(len(it.msg))
	q.bytes.Add(-n)
	q.d.queuedBytes.Add(-n)
}

// close stops the sender of a worker that left the registry; the hints
// still queued for it are dropped and counted as stale, and so is one a
// booking that looked the worker up just before enqueues afterwards.
func (q *queue) close() {
	q.stopped.Store(true)
	close(q.stop)
}

func (q *queue) run() {
	defer q.d.wg.Done()
	defer q.d.queues.Add(-1)
	if q.h1 != nil {
		defer q.h1.close()
	}
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

// drain posts what is queued until the queue is empty or the drain deadline
// cancels the base context; what is left then is counted as dropped.
func (q *queue) drain() {
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

func (q *queue) discard(r dropReason) {
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
func (q *queue) post(it queued) {
	m := q.d.metrics
	if time.Since(it.at) > q.d.opts.HintTTL {
		q.drop(dropReasonStale)
		return
	}
	if q.h1 != nil {
		q.postH1(it)
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
			q.drop(dropReasonShutdown)
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

// postH1 is post over the queue's own HTTP/1.1 connection.
func (q *queue) postH1(it queued) {
	m := q.d.metrics
	p := q.h1
	start := time.Now()
	status, err := p.post(q.d.base, it.msg, start)
	if err != nil {
		switch {
		case q.d.base.Err() != nil:
			// Cut short by a drain past its deadline, not the worker's fault.
			q.drop(dropReasonShutdown)
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
	if status.code < 200 || status.code > 299 {
		m.errStatus.Inc()
		q.logError(errors.New(status.text), "Worker refused a hint; not retried")
		return
	}
	m.hintsSent.Inc()
}

// h1Poster posts one queue's hints to an http:// endpoint over one
// keep-alive HTTP/1.1 connection: each post is one write of the whole
// request and a read of the answer, by the queue's sender itself. With
// net/http's Transport the same post crosses three goroutines (caller,
// writeLoop, readLoop), and the request head and body go out in separate
// writes when the body is large; at tens of thousands of hints a second
// that was the largest cost of the sidecar after the booking itself.
//
// Behaviour is the Transport's as NewHintClient configures it: one post per
// hint and never a retry; the timeout bounds the post, connection included;
// the answer is read to its end (at most maxAnswerBytes, or the connection
// is closed instead) so that the connection is kept; a connection the
// worker marks "Connection: close", or an HTTP/1.0 one, is not reused; one
// idle for maxIdle is closed, as IdleConnTimeout does. Where the
// Transport's read loop sees at once that a worker closed an idle
// connection (as servers do after their keep-alive timeout), the poster
// checks before reusing a connection that sat idle for probeIdle: a post
// written into a connection the worker has closed would be lost.
type h1Poster struct {
	// addr is dialled; head is the request up to the Content-Length value.
	addr    string
	head    []byte
	timeout time.Duration
	err     error // a bad endpoint: every post fails with it

	nc       net.Conn
	br       *bufio.Reader
	wbuf     []byte
	lastUsed time.Time
	// stop unregisters the hook that cuts the connection's I/O short when
	// the delivery's base context is cancelled.
	stop func() bool
}

const (
	// maxAnswerBytes is how much of a worker's answer is read to keep the
	// connection; past it the connection is closed.
	maxAnswerBytes = 64 << 10
	// probeIdle is how long a connection may sit idle before it is
	// checked for a close by the worker before reuse.
	probeIdle = 100 * time.Millisecond
	// maxIdle is how long a connection may sit idle and still be reused.
	maxIdle = 90 * time.Second
)

func newH1Poster(endpoint string, timeout time.Duration) *h1Poster {
	p := &h1Poster{timeout: timeout}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		p.err = err
	case u.Scheme != "http" || u.Host == "":
		p.err = fmt.Errorf("hint endpoint %q is not an http:// URL", endpoint)
	default:
		p.addr = u.Host
		if u.Port() == "" {
			p.addr = net.JoinHostPort(u.Hostname(), "80")
		}
		p.head = []byte("POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
			"\r\nUser-Agent: kvhint-sidecar\r\nContent-Type: application/json\r\nContent-Length: ")
	}
	return p
}

// answerStatus is an answer's status line.
type answerStatus struct {
	code int
	text string // "503 Service Unavailable"
}

// post sends msg and reads the answer. It never sends twice: an error
// after the request was (maybe) written is returned as is.
func (p *h1Poster) post(base context.Context, msg []byte, start time.Time) (answerStatus, error) {
	if p.err != nil {
		return answerStatus{}, p.err
	}
	deadline := start.Add(p.timeout)
	if p.nc != nil {
		if idle := start.Sub(p.lastUsed); idle > maxIdle || (idle > probeIdle && p.closedByPeer()) {
			p.close()
		}
	}
	if p.nc == nil {
		if err := p.dial(base, deadline); err != nil {
			return answerStatus{}, err
		}
	}
	p.nc.SetDeadline(deadline)
	// After the deadline is set, so that a cancellation's past deadline
	// cannot be overwritten unseen.
	if err := base.Err(); err != nil {
		p.close()
		return answerStatus{}, err
	}
	p.wbuf = append(p.wbuf[:0], p.head...)
	p.wbuf = strconv.AppendInt(p.wbuf, int64(len(msg)), 10)
	p.wbuf = append(p.wbuf, "\r\n\r\n"...)
	p.wbuf = append(p.wbuf, msg...)
	if _, err := p.nc.Write(p.wbuf); err != nil {
		p.close()
		return answerStatus{}, err
	}
	if cap(p.wbuf) > 256<<10 {
		p.wbuf = nil // one huge hint should not pin its buffer
	}
	st, keep, err := readAnswer(p.br)
	if be := (bodyError{}); errors.As(err, &be) {
		// The status is in: as post reads net/http's answers, a body that
		// ends short only costs the connection.
		err, keep = nil, false
	}
	if err != nil || !keep {
		p.close()
	} else {
		p.lastUsed = time.Now()
	}
	return st, err
}

// closedByPeer reports whether the idle connection has been closed (or
// written to) by the worker. Bytes already buffered are unasked data. Then
// the kernel is asked without waiting (peekClosed); where it cannot be, the
// connection is read with a deadline just ahead: an open, silent
// connection times out, a closed one reads EOF at once.
func (p *h1Poster) closedByPeer() bool {
	if p.br.Buffered() > 0 {
		return true
	}
	if closed, ok := peekClosed(p.nc); ok {
		return closed
	}
	p.nc.SetReadDeadline(time.Now().Add(50 * time.Microsecond))
	_, err := p.br.Peek(1)
	// Data the worker sent unasked is as fatal to the connection as a close.
	return err == nil || !isTimeout(err)
}

func (p *h1Poster) dial(base context.Context, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(base, deadline)
	defer cancel()
	d := net.Dialer{KeepAlive: 30 * time.Second, Control: checkDialAddress}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	p.nc = nc
	if p.br == nil {
		p.br = bufio.NewReaderSize(nc, 4<<10)
	} else {
		p.br.Reset(nc)
	}
	p.stop = context.AfterFunc(base, func() { nc.SetDeadline(time.Unix(1, 0)) })
	return nil
}

func (p *h1Poster) close() {
	if p.nc == nil {
		return
	}
	p.stop()
	p.nc.Close()
	p.nc, p.stop = nil, nil
}

// bodyError is a failure to read an answer's body, after its head.
type bodyError struct{ err error }

func (e bodyError) Error() string { return e.err.Error() }
func (e bodyError) Unwrap() error { return e.err }

// readAnswer reads one answer, skipping interim 1xx ones, and discards its
// body. keep says whether the connection can carry another post.
func readAnswer(br *bufio.Reader) (st answerStatus, keep bool, err error) {
	for {
		st, keep, err = readOneAnswer(br)
		if err != nil || st.code >= 200 {
			return st, keep, err
		}
	}
}

func readOneAnswer(br *bufio.Reader) (answerStatus, bool, error) {
	h, err := h1.ReadHead(br, false)
	st := answerStatus{code: h.Code, text: h.Text}
	if err != nil {
		return st, false, err
	}
	keep := !h.Close
	switch {
	case h.NoBody():
		return st, keep, nil
	case h.Chunked:
		st, keep, err := discardChunked(br, st, keep)
		if err != nil {
			err = bodyError{err}
		}
		return st, keep, err
	case h.ContentLength >= 0:
		if h.ContentLength > maxAnswerBytes {
			return st, false, nil
		}
		if _, err := br.Discard(int(h.ContentLength)); err != nil {
			return st, false, bodyError{h1.UnexpectedEOF(err)}
		}
		return st, keep, nil
	default:
		// Delimited by the end of the connection.
		n, err := io.CopyN(io.Discard, br, maxAnswerBytes)
		if err == io.EOF || (err == nil && n == maxAnswerBytes) {
			err = nil
		}
		if err != nil {
			err = bodyError{err}
		}
		return st, false, err
	}
}

func discardChunked(br *bufio.Reader, st answerStatus, keep bool) (answerStatus, bool, error) {
	total := int64(0)
	for {
		size, err := h1.ChunkSize(br)
		if err != nil {
			return st, false, err
		}
		if size == 0 {
			if err := h1.Trailers(br); err != nil {
				return st, false, err
			}
			return st, keep, nil
		}
		if total += size; total > maxAnswerBytes {
			return st, false, nil
		}
		if _, err := br.Discard(int(size)); err != nil {
			return st, false, h1.UnexpectedEOF(err)
		}
		if err := h1.ChunkEnd(br); err != nil {
			return st, false, err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// failureLogInterval is the least time between two logs of one worker's
// delivery errors; every error is counted regardless.
const failureLogInterval = 10 * time.Second

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
