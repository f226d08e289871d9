// Package loadgen replays realistic bookings against a sidecar's booking API
// at a target rate: multi-turn sessions that end with a final turn, a prefill
// and a decode booking per request, and committed KV copies on the roles
// whose selection commits them. It measures what a router would see.
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Role is one stage bookings go to, with the workers it books.
type Role struct {
	Name    string
	Workers []string
	// CopyRate is the share of bookings (0..1) that carry a committed KV
	// copy from another worker of the role; 0 for roles whose selection
	// never commits copies.
	CopyRate float64
}

// Options shape a run.
type Options struct {
	// Target is the sidecar's base URL, e.g. http://127.0.0.1:9470.
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
func (r *Result) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	return r.Latencies[i]
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
	}
	return nil
}

type job struct {
	body []byte
	due  time.Time
}

// Run offers the load and waits for every answer.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        o.Connections,
		MaxIdleConnsPerHost: o.Connections,
		MaxConnsPerHost:     o.Connections,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: o.Timeout}
	url := o.Target + "/v1/bookings"

	// Bodies are generated ahead of the clock so that encoding them does not
	// compete with the sends it is timing.
	total := int(o.Rate * o.Duration.Seconds())
	bodies := newStream(o).bodies(total)

	jobs := make(chan job, o.Connections*4)
	var (
		mu  sync.Mutex
		res = &Result{Offered: len(bodies)}
	)
	var hints, actions, errs atomic.Int64
	lat := make([][]time.Duration, o.Connections)
	var wg sync.WaitGroup
	for c := 0; c < o.Connections; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			local := make([]time.Duration, 0, len(bodies)/o.Connections+1)
			buf := make([]byte, 0, 4096)
			for j := range jobs {
				// Latency runs from the scheduled time when the send is
				// late (queueing is part of what a router would wait),
				// from the send itself when it is early.
				from := time.Now()
				if j.due.Before(from) {
					from = j.due
				}
				resp, err := client.Post(url, "application/json", bytes.NewReader(j.body))
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
					mu.Unlock()
					continue
				}
				buf = buf[:0]
				buf, _ = appendAll(buf, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					errs.Add(1)
					mu.Lock()
					if res.FirstError == "" {
						res.FirstError = fmt.Sprintf("%s: %s", resp.Status, bytes.Join(bytes.Fields(buf), []byte(" ")))
					}
					mu.Unlock()
					continue
				}
				local = append(local, time.Since(from))
				if n := bytes.Count(buf, []byte(`"action_id"`)); n > 0 {
					hints.Add(1)
					actions.Add(int64(n))
				}
			}
			lat[c] = local
		}(c)
	}

	start := time.Now()
	interval := time.Duration(float64(time.Second) / o.Rate)
	for i, b := range bodies {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 50*time.Microsecond {
			time.Sleep(d)
		}
		select {
		case jobs <- job{body: b, due: due}:
		case <-ctx.Done():
			res.Offered = i
			close(jobs)
			wg.Wait()
			return res, ctx.Err()
		}
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start)
	for _, l := range lat {
		res.Latencies = append(res.Latencies, l...)
	}
	slices.Sort(res.Latencies)
	res.Completed = len(res.Latencies)
	res.Errors = int(errs.Load())
	res.Hints = int(hints.Load())
	res.Actions = int(actions.Load())
	return res, nil
}

func appendAll(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
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
			out = append(out, s.booking(reqID, role, ses))
		}
	}
	return out
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

func (s *stream) booking(reqID string, role Role, ses *session) []byte {
	worker := role.Workers[s.rng.IntN(len(role.Workers))]
	b := make([]byte, 0, 512)
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
	return b.String()
}
