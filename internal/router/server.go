package router

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// Server limits. A booking is a few KiB and answered in microseconds; the
// ops listener serves probes and scrapes. Both are far inside these.
const (
	DefaultReadTimeout  = 5 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultIdleTimeout  = 60 * time.Second
	// maxReadHeaderTimeout bounds reading a request head on the ops and
	// pprof listeners; ReadTimeout bounds it too when shorter.
	maxReadHeaderTimeout = 2 * time.Second
	// MaxHeaderBytes caps a request head on every listener.
	MaxHeaderBytes = 16 << 10

	// DefaultMaxBookingConns and DefaultMaxOpsConns, with the delivery
	// connections (at most MaxConnsPerWorker per worker), keep the sidecar
	// well inside a 1,024-descriptor limit.
	DefaultMaxBookingConns = 512
	DefaultMaxOpsConns     = 64
	// maxPprofConns caps the loopback pprof listener.
	maxPprofConns = 4
	// pprofWriteTimeout leaves room for a 30 s CPU profile or trace.
	pprofWriteTimeout = 2 * time.Minute
)

// refusal is what a connection over the cap reads before it is closed.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")

// capListener caps the connections a listener has open. net/http accepts
// without bound and golang.org/x/net/netutil.LimitListener stops accepting
// at its cap, which leaves the kernel's backlog to fill with clients that
// wait unanswered; this one accepts the connection over the cap, answers
// 503 and closes it at once, and counts it: an overloaded sidecar says so,
// fast, and in its metrics.
//
// It also knows its open connections, so that a shutdown can close the
// ones still open after its grace: fasthttp's Server, unlike net/http's,
// has no Close that does.
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused prometheus.Counter

	mu    sync.Mutex
	conns map[*capConn]struct{}
}

func newCapListener(ln net.Listener, max int, refused prometheus.Counter) *capListener {
	return &capListener{Listener: ln, max: int64(max), refused: refused, conns: make(map[*capConn]struct{})}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Inc()
			// A fresh connection's send buffer is empty: the write does
			// not wait, and the deadline makes sure of it.
			c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
			c.Write(refusal)
			c.Close()
			continue
		}
		cc := &capConn{Conn: c, l: l}
		l.mu.Lock()
		l.conns[cc] = struct{}{}
		l.mu.Unlock()
		return cc, nil
	}
}

// Open is the number of connections open now.
func (l *capListener) Open() int64 { return l.open.Load() }

// closeConns closes every connection still open, at once.
func (l *capListener) closeConns() {
	l.mu.Lock()
	conns := make([]*capConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.linger.Store(false)
		c.Close()
	}
}

// capConn gives its place back when closed, once.
type capConn struct {
	net.Conn
	l      *capListener
	once   sync.Once
	linger atomic.Bool
}

// Lingering close: a connection closed with bytes of the request unread
// is reset, and the reset can reach the client before it has read the
// answer (a 413 sent while it still writes the body), which it then never
// sees. Before closing such a connection, as net/http does, the server
// closes its side for writing and reads what comes, for a while.
const (
	lingerTime     = 500 * time.Millisecond
	maxLingerBytes = 4 << 20
)

// lingerOnClose makes the close of ctx's connection a lingering one: for
// an answer that closes the connection before the request's body was read.
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	if c, ok := ctx.Conn().(*capConn); ok {
		c.linger.Store(true)
	}
}

func (c *capConn) Close() error {
	if c.linger.Swap(false) {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
			io.CopyN(io.Discard, c.Conn, maxLingerBytes)
		}
	}
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}

// serverLimits are one listener's timeouts.
type serverLimits struct {
	read, write, idle time.Duration
}

// newServer is an http.Server with the limits every sidecar listener has:
// the ops and pprof listeners'.
func newServer(h http.Handler, lim serverLimits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(lim.read, maxReadHeaderTimeout),
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// newBookingServer is the booking listener's server, with the limits every
// sidecar listener has. Bookings are the sidecar's hot path, and fasthttp
// reuses each connection's request and response and starts no goroutine
// per request: a booking costs fewer allocations, less GC and fewer
// wake-ups than on net/http. The reads and writes, most of a server's
// cost on loopback, are the same.
//
//   - ReadTimeout bounds a request, head and body, from its first byte (a
//     connection's first request: from the accept), as net/http's
//     ReadTimeout does; the separate head timeout of the other listeners has
//     no fasthttp equivalent. A body still arriving when it passes is
//     answered 408.
//   - The read buffer is the head limit: a head that does not fit in it is
//     answered 431.
//   - Bodies are streamed (StreamRequestBody): the handler reads them, into
//     a buffer that grows as bytes arrive, and answers one over its limit
//     413. Read whole, a body would be allocated at its declared
//     Content-Length before a byte of it came, which a stalled client could
//     make cost megabytes; and fasthttp would answer one over the limit
//     itself. MaxRequestBodySize is then only what fasthttp reads of a body
//     before it calls the handler (it reads the least of it, the
//     Content-Length and 8 KiB): one byte, so that a body declared over the
//     limit is refused as soon as it starts, not once 8 KiB of it came.
//     One that asks "Expect: 100-continue" is refused before it starts
//     (API.ExpectBody, set as the server's ExpectHandler).
//   - Answers during a shutdown say Connection: close, as net/http's do:
//     a client must not send its next booking on a connection about to
//     close, since a POST is not retried.
//   - No Server header, no default Content-Type, and multipart bodies are
//     not parsed: the API takes JSON, which a multipart body is not.
//   - Errors (a malformed request, a client gone) are logged at V(1), and
//     without request contents: they are the clients' problem, and
//     net/http does not log them at all.
func newBookingServer(h fasthttp.RequestHandler, lim serverLimits, log logr.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      h,
		ErrorHandler:                 answerServerError,
		ReadTimeout:                  lim.read,
		WriteTimeout:                 lim.write,
		IdleTimeout:                  lim.idle,
		ReadBufferSize:               MaxHeaderBytes,
		MaxRequestBodySize:           1,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		SecureErrorLogMessage:        true,
		Logger:                       serverLog{log},
	}
}

// answerServerError answers a request fasthttp could not read (the
// handler never saw it) with a JSON error, as the API answers its own. The
// connection is closed after it.
func answerServerError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, fmt.Errorf("request head is over the %d-byte limit", MaxHeaderBytes))
	case errors.As(err, &ne) && ne.Timeout():
		writeError(ctx, fasthttp.StatusRequestTimeout, errors.New("the request was not read within the read timeout"))
	default:
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("malformed request: %w", err))
	}
}

// serverLog takes fasthttp's log lines.
type serverLog struct{ log logr.Logger }

func (l serverLog) Printf(format string, args ...any) {
	l.log.V(1).Info("Booking server", "detail", fmt.Sprintf(format, args...))
}
