// Package loadgen replays realistic bookings against a sidecar's booking API
// at a target rate: multi-turn sessions that end with a final turn, a prefill
// and a decode booking per request, and committed KV copies on the roles
// whose selection commits them. It measures what a router would see.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Role is one stage bookings go to, with the workers it books.
type Role struct {
	Name    string
	Workers []string
	// CopyRate is the share of bookings (0..1) that carry a committed KV
	// copy from another worker of the role; 0 for roles whose selection
	// never commits copies.
	CopyRate float64
	// CopyBlocks is the number of block hashes of every copy; 0 takes the
	// prompt's blocks, up to 256.
	CopyBlocks int
}

// Options shape a run.
type Options struct {
	// Target is the sidecar's base URL, e.g. http://127.0.0.1:9470, or
	// unix:///PATH of its socket.
	Target string
	// Rate is the bookings per second to offer; Duration how long to offer them.
	Rate     float64
	Duration time.Duration
	// Connections is how many keep-alive connections carry the load.
	Connections int
	// Roles each request books in order (prefill then decode, say).
	Roles []Role
	// MaxTurns bounds a session's length; sessions last 1..MaxTurns turns.
	MaxTurns int
	// BlockSize is the tokens per KV block.
	BlockSize int
	// Seed makes the booking stream repeatable.
	Seed uint64
	// Timeout bounds one booking call.
	Timeout time.Duration
	// IDPrefix starts every request and session ID, so that successive runs
	// against one sidecar do not reuse IDs.
	IDPrefix string
}

// Result is what a run measured.
type Result struct {
	Offered   int           // bookings scheduled
	Completed int           // bookings answered 2xx
	Errors    int           // failed calls or non-2xx answers
	Elapsed   time.Duration // from the first send to the last answer
	Hints     int           // answers that carried a hint
	Actions   int           // actions in those hints
	Latencies []time.Duration
	// SendLags are how late each booking was sent after its scheduled
	// time, sorted: the generator's own pacing error plus any wait for a
	// free connection. Both are inside Latencies.
	SendLags []time.Duration
	// FirstError is the first failure seen, for the report.
	FirstError string
}

// Rate is the completed bookings per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Completed) / r.Elapsed.Seconds()
}

// Percentile returns the q-quantile (0..1) of the latencies, measured from
// each booking's scheduled send time so that a stalled server is not hidden
// by the generator waiting for it.
func (r *Result) Percentile(q float64) time.Duration { return quantile(r.Latencies, q) }

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

// Validate checks the options.
func (o *Options) Validate() error {
	switch {
	case o.Target == "":
		return errors.New("target is required")
	case o.Rate <= 0:
		return errors.New("rate must be above 0")
	case o.Duration <= 0:
		return errors.New("duration must be above 0")
	case o.Connections <= 0:
		return errors.New("connections must be above 0")
	case len(o.Roles) == 0:
		return errors.New("at least one role is required")
	case o.MaxTurns <= 0:
		return errors.New("max turns must be above 0")
	case o.BlockSize <= 0:
		return errors.New("block size must be above 0")
	}
	for _, r := range o.Roles {
		if len(r.Workers) == 0 {
			return fmt.Errorf("role %s has no workers", r.Name)
		}
		if r.CopyRate < 0 || r.CopyRate > 1 {
			return fmt.Errorf("role %s: copy rate %g is outside 0..1", r.Name, r.CopyRate)
		}
		if r.CopyBlocks < 0 || r.CopyBlocks > 1<<20 {
			return fmt.Errorf("role %s: copy blocks %d is outside 0..%d", r.Name, r.CopyBlocks, 1<<20)
		}
	}
	return nil
}

// Run offers the load and waits for every answer.
//
// The bookings are generated and encoded as whole HTTP requests, by
// fasthttp, before the clock starts, so that encoding them does not
// compete with the sends it is timing. Then a pacer, on its own OS thread
// with fine-grained sleeps (Go's own timers may fire up to a millisecond
// late on an idle process, which would be counted as the sidecar's
// latency), writes each request when it is due on a connection that is
// free, and each connection's goroutine reads the answers with fasthttp. A
// booking's latency runs from its scheduled time to the end of its answer,
// so time spent waiting for a free connection is counted.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	tgt, err := parseTarget(o.Target)
	if err != nil {
		return nil, err
	}
	total := int(o.Rate * o.Duration.Seconds())
	reqs, err := newStream(o).requests(total, tgt)
	if err != nil {
		return nil, err
	}

	r := &runner{
		o:      o,
		tgt:    tgt,
		dialer: &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second},
		free:   make(chan *conn, o.Connections),
		res:    &Result{Offered: len(reqs)},
	}
	for range o.Connections {
		c := &conn{lat: make([]time.Duration, 0, total/o.Connections+1)}
		r.conns = append(r.conns, c)
		// Connect before the clock starts; a failure here is retried, and
		// counted, by the first booking that takes the connection.
		if nc, err := dial(tgt, r.dialer); err == nil {
			r.start(c, nc)
		}
		r.free <- c
	}

	res := r.res
	res.SendLags = make([]time.Duration, 0, len(reqs))
	unpin := pinPacer()
	interval := time.Duration(float64(time.Second) / o.Rate)
	start := time.Now()
	for i, req := range reqs {
		due := start.Add(time.Duration(i) * interval)
		sleepUntil(due)
		var c *conn
		select {
		case c = <-r.free:
		case <-ctx.Done():
		}
		if c == nil {
			res.Offered = i
			break
		}
		res.SendLags = append(res.SendLags, max(time.Since(due), 0))
		r.send(c, req, due)
	}
	unpin()
	// Every connection comes back once its last answer is in (or timed out).
	for range o.Connections {
		<-r.free
	}
	res.Elapsed = time.Since(start)
	for _, c := range r.conns {
		c.mu.Lock()
		nc := c.nc
		c.nc = nil
		c.mu.Unlock()
		if nc != nil {
			nc.Close()
		}
	}
	r.readers.Wait()
	for _, c := range r.conns {
		res.Latencies = append(res.Latencies, c.lat...)
		res.Errors += c.errors
		res.Hints += c.hints
		res.Actions += c.actions
	}
	slices.Sort(res.Latencies)
	slices.Sort(res.SendLags)
	res.Completed = len(res.Latencies)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// unixScheme starts a target that is a Unix socket, as the sidecar's
// --listen takes it: unix:///run/kvhint/booking.sock.
const unixScheme = "unix://"

// unixHost is the Host header of requests over a Unix socket, which has
// no host name; curl --unix-socket sends the same.
const unixHost = "localhost"

// target is where the bookings go.
type target struct {
	// network is "tcp" or "unix"; addr is what to dial on it.
	network, addr string
	// host is the Host header; path prefixes /v1/bookings.
	host, path string
}

// parseTarget reads the base URL: http://HOST:PORT[/PATH], or
// unix:///PATH for a sidecar listening on a Unix socket. The generator
// speaks plain HTTP/1.1 only, which is what the sidecar's booking API
// serves on either.
func parseTarget(s string) (target, error) {
	if path, ok := strings.CutPrefix(s, unixScheme); ok {
		if !strings.HasPrefix(path, "/") || filepath.Clean(path) != path {
			return target{}, fmt.Errorf("target %q: want unix:///ABSOLUTE/PATH of the socket", s)
		}
		return target{network: "unix", addr: path, host: unixHost}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return target{}, fmt.Errorf("target %q: %w", s, err)
	}
	if u.Scheme != "http" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return target{}, fmt.Errorf("target %q: want a plain http://HOST:PORT[/PATH] base URL or unix:///PATH", s)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return target{network: "tcp", addr: addr, host: u.Host, path: strings.TrimSuffix(u.EscapedPath(), "/")}, nil
}

// runner is one run's shared state.
type runner struct {
	o       Options
	tgt     target
	dialer  *net.Dialer
	conns   []*conn
	free    chan *conn
	readers sync.WaitGroup
	res     *Result

	errMu sync.Mutex
}

// conn is one keep-alive connection and what it measured. It is in the
// free channel, owned by the pacer, or carrying one booking, owned by its
// reader goroutine, which puts it back in free when the answer is in.
type conn struct {
	mu sync.Mutex
	nc net.Conn // nil when closed; the next booking redials
	// inflight is set while a booking waits for its answer; from is when
	// its latency starts; werr is the pacer's write error, if any.
	inflight bool
	from     time.Time
	werr     error

	// Written by whoever owns the connection (see above).
	lat                    []time.Duration
	errors, hints, actions int
}

// start runs the reader of a new connection.
func (r *runner) start(c *conn, nc net.Conn) {
	c.mu.Lock()
	c.nc = nc
	c.mu.Unlock()
	r.readers.Add(1)
	go r.read(c, nc)
}

// send writes one request on c, redialling it first if it is closed.
func (r *runner) send(c *conn, req []byte, due time.Time) {
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	if nc == nil {
		var err error
		if nc, err = dial(r.tgt, r.dialer); err != nil {
			c.errors++
			r.firstError(err.Error())
			r.free <- c
			return
		}
		r.start(c, nc)
	}
	// Latency runs from the scheduled time when the send is late (queueing
	// is part of what a router would wait), from the send itself when it
	// is early.
	from := time.Now()
	if due.Before(from) {
		from = due
	}
	c.mu.Lock()
	c.inflight, c.from, c.werr = true, from, nil
	c.mu.Unlock()
	nc.SetDeadline(time.Now().Add(r.o.Timeout))
	if _, err := nc.Write(req); err != nil {
		// The reader fails too, on the closed connection, and counts it.
		c.mu.Lock()
		if c.inflight && c.nc == nc {
			c.werr = err
		}
		c.mu.Unlock()
		nc.Close()
	}
}

// read reads the answers on nc until it fails or is closed.
func (r *runner) read(c *conn, nc net.Conn) {
	defer r.readers.Done()
	br := bufio.NewReaderSize(nc, 32<<10)
	// The answer's body buffer stays with the connection.
	resp := fasthttp.Response{KeepBodyBuffer: true}
	for {
		// fasthttp skips interim 1xx answers and reads a body delimited by
		// Content-Length, chunks or the end of the connection.
		err := resp.ReadLimitBody(br, maxResponseBody)
		end := time.Now()
		c.mu.Lock()
		inflight, from, werr := c.inflight, c.from, c.werr
		c.inflight, c.werr = false, nil
		// ConnectionClose is also set for an answer delimited by the end
		// of the connection and for HTTP/1.0 without keep-alive.
		closing := err != nil || resp.ConnectionClose() || !inflight
		if closing && c.nc == nc {
			c.nc = nil
		}
		c.mu.Unlock()
		if !inflight {
			// The connection failed or was closed while idle, or the
			// server answered nothing asked: the next booking redials.
			nc.Close()
			return
		}
		switch {
		case err != nil:
			if werr != nil {
				err = werr
			}
			c.errors++
			r.firstError(err.Error())
		case resp.StatusCode()/100 != 2:
			c.errors++
			if r.wantFirstError() {
				r.firstError(fmt.Sprintf("%s: %s", statusText(&resp), bytes.Join(bytes.Fields(resp.Body()), []byte(" "))))
			}
		default:
			c.lat = append(c.lat, end.Sub(from))
			if n := bytes.Count(resp.Body(), []byte(`"action_id"`)); n > 0 {
				c.hints++
				c.actions += n
			}
		}
		if closing {
			nc.Close()
		} else {
			nc.SetDeadline(time.Time{})
		}
		r.free <- c
		if closing {
			return
		}
	}
}

// statusText is the answer's status line after the protocol, "404 Not
// Found".
func statusText(resp *fasthttp.Response) string {
	s := strconv.Itoa(resp.StatusCode())
	if m := resp.Header.StatusMessage(); len(m) > 0 {
		s += " " + string(m)
	}
	return s
}

// wantFirstError reports whether no failure has been noted yet, so that a
// reader formats an answer into an error only when it will be kept.
func (r *runner) wantFirstError() bool {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.res.FirstError == ""
}

func (r *runner) firstError(msg string) {
	r.errMu.Lock()
	if r.res.FirstError == "" {
		r.res.FirstError = msg
	}
	r.errMu.Unlock()
}

// stream generates the bookings of interleaved sessions.
type stream struct {
	o       Options
	rng     *rand.Rand
	nextReq int
	nextSes int
	live    []*session
}

type session struct {
	id     string
	turn   int
	turns  int
	prompt int
}

func newStream(o Options) *stream {
	return &stream{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
}

// bodies returns n booking bodies: each request books every role in order,
// within a session that grows by a turn per request.
func (s *stream) bodies(n int) [][]byte {
	out := make([][]byte, 0, n)
	for len(out) < n {
		ses := s.pick()
		s.nextReq++
		reqID := s.o.IDPrefix + "req-" + strconv.Itoa(s.nextReq)
		for _, role := range s.o.Roles {
			if len(out) == n {
				break
			}
			out = append(out, s.appendBooking(make([]byte, 0, 512+21*role.CopyBlocks), reqID, role, ses))
		}
	}
	return out
}

// requests returns the same bookings as bodies, each encoded by fasthttp
// as a whole HTTP request to tgt, packed into a few large blocks of memory.
func (s *stream) requests(n int, tgt target) ([][]byte, error) {
	const block = 16 << 20
	enc := newRequestEncoder(tgt)
	out := make([][]byte, 0, n)
	var arena, body []byte
	for len(out) < n {
		ses := s.pick()
		s.nextReq++
		reqID := s.o.IDPrefix + "req-" + strconv.Itoa(s.nextReq)
		for _, role := range s.o.Roles {
			if len(out) == n {
				break
			}
			body = s.appendBooking(body[:0], reqID, role, ses)
			req, err := enc.encode(body)
			if err != nil {
				return nil, fmt.Errorf("encoding booking %d: %w", len(out)+1, err)
			}
			if cap(arena)-len(arena) < len(req) {
				arena = make([]byte, 0, max(block, len(req)))
			}
			from := len(arena)
			arena = append(arena, req...)
			out = append(out, arena[from:len(arena):len(arena)])
		}
	}
	return out, nil
}

// pick returns the session of the next request: a live one most of the
// time, a new one otherwise, so turns of many sessions interleave.
func (s *stream) pick() *session {
	if len(s.live) < 64 || s.rng.IntN(4) == 0 {
		s.nextSes++
		s.live = append(s.live, &session{
			id:     s.o.IDPrefix + "sess-" + strconv.Itoa(s.nextSes),
			turns:  1 + s.rng.IntN(s.o.MaxTurns),
			prompt: 256 + s.rng.IntN(4096),
		})
	}
	i := s.rng.IntN(len(s.live))
	ses := s.live[i]
	ses.turn++
	ses.prompt += 64 + s.rng.IntN(512)
	if ses.turn >= ses.turns {
		s.live = append(s.live[:i], s.live[i+1:]...)
	}
	return ses
}

// appendBooking appends one booking's JSON body to b.
func (s *stream) appendBooking(b []byte, reqID string, role Role, ses *session) []byte {
	worker := role.Workers[s.rng.IntN(len(role.Workers))]
	b = append(b, `{"request_id":"`...)
	b = append(b, reqID...)
	b = append(b, `","role":"`...)
	b = append(b, role.Name...)
	b = append(b, `","worker":"`...)
	b = append(b, worker...)
	b = append(b, `","prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(ses.prompt), 10)
	b = append(b, `,"block_size":`...)
	b = strconv.AppendInt(b, int64(s.o.BlockSize), 10)
	b = append(b, `,"session":{"id":"`...)
	b = append(b, ses.id...)
	b = append(b, `","turn":`...)
	b = strconv.AppendInt(b, int64(ses.turn), 10)
	b = append(b, `,"final":`...)
	b = strconv.AppendBool(b, ses.turn >= ses.turns)
	b = append(b, '}')
	if len(role.Workers) > 1 && role.CopyRate > 0 && s.rng.Float64() < role.CopyRate {
		src := role.Workers[s.rng.IntN(len(role.Workers))]
		for src == worker {
			src = role.Workers[s.rng.IntN(len(role.Workers))]
		}
		blocks := min(ses.prompt/s.o.BlockSize, 256)
		if role.CopyBlocks > 0 {
			blocks = role.CopyBlocks
		}
		b = append(b, `,"committed_kv_copy":{"source_worker":"`...)
		b = append(b, src...)
		b = append(b, `","source_endpoint":"tcp://`...)
		b = append(b, src...)
		b = append(b, `:23280","block_hashes":[`...)
		for i := 0; i < max(blocks, 1); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, s.rng.Uint64(), 10)
		}
		b = append(b, "]}"...)
	}
	return append(b, '}')
}

// Report renders a result for people.
func (r *Result) Report(o Options) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "offered   %d bookings at %.0f/s for %s over %d connections\n", r.Offered, o.Rate, o.Duration, o.Connections)
	fmt.Fprintf(&b, "completed %d in %s: %.0f bookings/s, %d errors\n", r.Completed, r.Elapsed.Round(time.Millisecond), r.Rate(), r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(&b, "first error: %s\n", r.FirstError)
	}
	fmt.Fprintf(&b, "latency   p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
		r.Percentile(0.50), r.Percentile(0.90), r.Percentile(0.99), r.Percentile(0.999), r.Percentile(1))
	fmt.Fprintf(&b, "hints     %d built, %d actions\n", r.Hints, r.Actions)
	fmt.Fprintf(&b, "send lag  p50 %s  p99 %s  max %s (sent after the scheduled time; counted in latency)\n",
		quantile(r.SendLags, 0.50), quantile(r.SendLags, 0.99), quantile(r.SendLags, 1))
	return b.String()
}
