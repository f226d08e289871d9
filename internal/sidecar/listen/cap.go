package listen

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
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
	// MaxPprofConns caps the loopback pprof listener.
	MaxPprofConns = 4
	// PprofWriteTimeout leaves room for a 30 s CPU profile or trace.
	PprofWriteTimeout = 2 * time.Minute
)

// refusal is what a connection over the cap reads before it is closed.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")

// CapListener caps the connections a listener has open. net/http accepts
// without bound and golang.org/x/net/netutil.LimitListener stops accepting
// at its cap, which leaves the kernel's backlog to fill with clients that
// wait unanswered; this one accepts the connection over the cap, answers
// 503 and closes it at once, and counts it: an overloaded sidecar says so,
// fast, and in its metrics.
//
// It also knows its open connections, so that a shutdown can close the
// ones still open after its grace: fasthttp's Server, unlike net/http's,
// has no Close that does.
type CapListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused prometheus.Counter

	mu    sync.Mutex
	conns map[*capConn]struct{}
}

// NewCapListener caps ln at max open connections, counting refusals in
// refused.
func NewCapListener(ln net.Listener, max int, refused prometheus.Counter) *CapListener {
	return &CapListener{Listener: ln, max: int64(max), refused: refused, conns: make(map[*capConn]struct{})}
}

func (l *CapListener) Accept() (net.Conn, error) {
	var wait time.Duration
	for {
		c, err := l.Listener.Accept()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			// Out of descriptors: wait for some to close, as net/http's
			// server does, instead of returning an error the server stops
			// on (fasthttp's does). The connection waits in the backlog.
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			time.Sleep(wait)
			continue
		}
		if err != nil {
			return nil, err
		}
		wait = 0
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
func (l *CapListener) Open() int64 { return l.open.Load() }

// CloseConns closes every connection still open, at once.
func (l *CapListener) CloseConns() {
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
	l      *CapListener
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

// LingerOnClose makes the close of a connection a CapListener accepted a
// lingering one: for an answer that closes the connection before the
// request's body was read.
func LingerOnClose(conn net.Conn) {
	if c, ok := conn.(*capConn); ok {
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

// Limits are one listener's timeouts.
type Limits struct {
	Read, Write, Idle time.Duration
}

// NewHTTPServer is an http.Server with the limits every sidecar listener has:
// the ops and pprof listeners'.
func NewHTTPServer(h http.Handler, lim Limits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(lim.Read, maxReadHeaderTimeout),
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// Metrics are the listeners' metrics: connections refused over a cap, and
// each listener's open connections.
type Metrics struct {
	reg     prometheus.Registerer
	refused *prometheus.CounterVec
}

// NewMetrics registers the listeners' metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reg: reg, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: dispatchmetrics.Namespace, Name: "connections_refused_total",
		Help: "Connections answered 503 and closed because their listener (booking, ops, pprof) had its cap open.",
	}, []string{"listener"})}
	reg.MustRegister(m.refused)
	return m
}

// Cap caps a listener named name (booking, ops, pprof) at max open
// connections, and adds its open-connections gauge and refusal series, so
// that both read 0 before any traffic.
func (m *Metrics) Cap(name string, ln net.Listener, max int) *CapListener {
	l := NewCapListener(ln, max, m.refused.WithLabelValues(name))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: dispatchmetrics.Namespace, Name: "open_connections",
		Help:        "Connections open on a listener (booking, ops, pprof); capped by --max-booking-connections and --max-ops-connections.",
		ConstLabels: prometheus.Labels{"listener": name},
	}, func() float64 { return float64(l.Open()) }))
	return l
}
