package router

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Server limits. A booking is a few KiB and answered in microseconds; the
// ops listener serves probes and scrapes. Both are far inside these.
const (
	DefaultReadTimeout  = 5 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultIdleTimeout  = 60 * time.Second
	// maxReadHeaderTimeout bounds reading a request head; ReadTimeout
	// bounds it too when shorter.
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
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused prometheus.Counter
}

func newCapListener(ln net.Listener, max int, refused prometheus.Counter) *capListener {
	return &capListener{Listener: ln, max: int64(max), refused: refused}
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
		return &capConn{Conn: c, l: l}, nil
	}
}

// Open is the number of connections open now.
func (l *capListener) Open() int64 { return l.open.Load() }

// capConn gives its place back when closed, once.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// serverLimits are one listener's timeouts.
type serverLimits struct {
	read, write, idle time.Duration
}

// newServer is an http.Server with the limits every sidecar listener has.
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
