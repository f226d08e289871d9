package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// This file is the generator's client side. Each keep-alive connection is
// a sender: a goroutine that owns a fasthttp.HostClient limited to that one
// connection and a Request and Response it reuses, so that a booking costs
// no allocation. The pacer hands a sender each booking when it is due and
// wakes it (see waker); the sender makes the call, times it, counts it and
// goes back to the free list. One call at a time per connection, as a
// router's client makes them: no pipelining, which would queue bookings
// behind each other on the wire where the generator could not time the
// wait. fasthttp closes a connection left idle for 10 s, well before the
// sidecar's own 60 s idle timeout would close it under a booking.

// maxResponseBody bounds one answer's body; a hint is a few KiB.
const maxResponseBody = 16 << 20

// userAgent names the generator in the requests it sends.
const userAgent = "kvhint-loadgen"

// job is one booking handed to a sender: its body and when it was due.
type job struct {
	body []byte
	due  time.Time
}

// sender is one keep-alive connection and what it measured. It is in the
// runner's free list, owned by the pacer, or carrying one booking, owned
// by its own goroutine, which puts it back in the free list when the
// answer is in or the call failed.
type sender struct {
	hc   *fasthttp.HostClient
	req  fasthttp.Request
	resp fasthttp.Response
	// jobs carries the booking the pacer hands over, or is closed at the
	// end of the run; wake says that it did either.
	jobs chan job
	wake *waker
	// dial connects to the target; early holds the connection dialled
	// before the clock started, for the client's first dial to take.
	dial  func() (net.Conn, error)
	early chan net.Conn

	// Written by the sender's goroutine only.
	lat                    []time.Duration
	errors, hints, actions int
}

// newSender returns a sender for the bookings of tgt, with room for n
// latencies.
func newSender(tgt target, timeout time.Duration, n int) (*sender, error) {
	wake, err := newWaker()
	if err != nil {
		return nil, err
	}
	s := &sender{
		wake:  wake,
		jobs:  make(chan job, 1),
		early: make(chan net.Conn, 1),
		lat:   make([]time.Duration, 0, n),
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	s.dial = func() (net.Conn, error) { return d.Dial(tgt.network, tgt.addr) }
	s.hc = &fasthttp.HostClient{
		// Addr only names the target in fasthttp's own errors: Dial
		// ignores it, since fasthttp would append a port to a socket path.
		Addr: tgt.host,
		Dial: func(string) (net.Conn, error) {
			select {
			case c := <-s.early:
				return c, nil
			default:
			}
			return s.dial()
		},
		MaxConns:            1,
		MaxResponseBodySize: maxResponseBody,
		// Send the path exactly as the target URL spelled it.
		DisablePathNormalizing: true,
		// A POST is never retried: a second booking would be counted
		// twice by the sidecar. fasthttp's default already retries only
		// idempotent methods; this says so.
		MaxIdemponentCallAttempts: 1,
	}
	setBookingRequest(&s.req, tgt)
	return s, nil
}

// setBookingRequest makes req the request every booking of tgt sends,
// without its body.
func setBookingRequest(req *fasthttp.Request, tgt target) {
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + tgt.host + tgt.path + "/v1/bookings")
	req.URI().DisablePathNormalizing = true
	req.Header.SetContentType("application/json")
	req.Header.SetUserAgent(userAgent)
}

// dialEarly connects before the clock starts so that the first booking
// is not timed with a dial; a failure here is retried, and counted, by the
// first booking that the sender makes.
func (s *sender) dialEarly() {
	if c, err := s.dial(); err == nil {
		s.early <- c
	}
}

// hand gives s a booking; s must be free.
func (s *sender) hand(j job) {
	s.jobs <- j
	s.wake.wake()
}

// stop ends s's goroutine once it is free.
func (s *sender) stop() {
	close(s.jobs)
	s.wake.wake()
}

// run makes the calls the pacer hands over until stopped.
func (s *sender) run(r *runner) {
	defer r.senders.Done()
	for {
		if err := s.wake.wait(); err != nil {
			panic(fmt.Sprintf("loadgen: waiting for a booking: %v", err))
		}
		j, ok := <-s.jobs
		if !ok {
			break
		}
		s.call(r, j)
		r.free <- s
	}
	s.wake.close()
	s.hc.CloseIdleConnections()
	// A dial made early and never used is still open.
	select {
	case c := <-s.early:
		c.Close()
	default:
	}
}

// call makes one booking call and records it.
func (s *sender) call(r *runner, j job) {
	// Latency runs from the scheduled time when the call is late (queueing
	// is part of what a router would wait), from the call itself when the
	// pacer woke early.
	from := time.Now()
	if j.due.Before(from) {
		from = j.due
	}
	s.req.SetBodyRaw(j.body)
	err := s.hc.DoTimeout(&s.req, &s.resp, r.o.Timeout)
	end := time.Now()
	if err != nil {
		s.errors++
		if r.wantFirstError() {
			r.firstError(callError(err, r.o.Timeout))
		}
		return
	}
	if code := s.resp.StatusCode(); code/100 != 2 {
		s.errors++
		if r.wantFirstError() {
			status := strconv.Itoa(code)
			if m := s.resp.Header.StatusMessage(); len(m) > 0 {
				status += " " + string(m)
			}
			r.firstError(fmt.Sprintf("%s: %s", status, bytes.Join(bytes.Fields(s.resp.Body()), []byte(" "))))
		}
		return
	}
	s.lat = append(s.lat, end.Sub(from))
	if n := bytes.Count(s.resp.Body(), []byte(`"action_id"`)); n > 0 {
		s.hints++
		s.actions += n
	}
}

// callError says what failed. fasthttp reports a call that ran out of
// time as a bare "timeout"; the report says which.
func callError(err error, timeout time.Duration) string {
	if errors.Is(err, fasthttp.ErrTimeout) {
		return fmt.Sprintf("no answer within the %s timeout: %v", timeout, err)
	}
	return err.Error()
}
