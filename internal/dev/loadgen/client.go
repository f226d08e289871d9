package loadgen

import (
	"bufio"
	"net"

	"github.com/valyala/fasthttp"
)

// This file is the generator's HTTP: fasthttp encodes every booking as a
// whole request before the clock starts, and reads every answer. The
// generator keeps its own keep-alive connections, one request at a time
// on each: the pacer writes a request when it is due on a free connection
// and each connection's goroutine reads the answers (see runner).
//
// It does not call fasthttp's client (HostClient.Do) because a call blocks
// until its answer is in: the pacer would have to hand every booking to a
// goroutine that makes the call, and that hand-off costs a booking either
// a wake-up through the network poller (three more system calls, about
// 20% more of the generator's CPU, so that at 30,000 bookings/s it fell
// behind on a core it shares) or, through a channel, a wait behind the
// pacer's raw sleep that adds some 100 µs to every latency measured.

// maxResponseBody bounds one answer's body; a hint is a few KiB.
const maxResponseBody = 16 << 20

// userAgent names the generator in the requests it sends.
const userAgent = "kvhint-loadgen"

// requestEncoder encodes booking requests to one target with fasthttp.
type requestEncoder struct {
	req fasthttp.Request
	out appender
	bw  *bufio.Writer
}

func newRequestEncoder(tgt target) *requestEncoder {
	e := &requestEncoder{}
	e.bw = bufio.NewWriter(&e.out)
	e.req.Header.SetMethod(fasthttp.MethodPost)
	e.req.SetRequestURI("http://" + tgt.host + tgt.path + "/v1/bookings")
	// Send the path exactly as the target URL spelled it.
	e.req.URI().DisablePathNormalizing = true
	e.req.Header.SetContentType("application/json")
	e.req.Header.SetUserAgent(userAgent)
	return e
}

// encode returns the whole request that books body; it is valid until
// the next call.
func (e *requestEncoder) encode(body []byte) ([]byte, error) {
	e.out = e.out[:0]
	e.req.SetBodyRaw(body)
	if err := e.req.Write(e.bw); err != nil {
		return nil, err
	}
	if err := e.bw.Flush(); err != nil {
		return nil, err
	}
	return e.out, nil
}

// appender is an io.Writer that appends to itself.
type appender []byte

func (a *appender) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}

// dial opens a connection to the target: on TCP with Nagle's algorithm
// off (Go's default), or to a Unix socket.
func dial(t target, d *net.Dialer) (net.Conn, error) {
	return d.Dial(t.network, t.addr)
}
