package delivery

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
)

// hintConn is a connection to a worker as the poster's HostClient holds it.
// It is the one piece of socket code delivery keeps, for two things fasthttp
// does not do.
//
// fasthttp leaves idle connections in its pool unread, so it never notices
// that a worker closed one (as servers do after their keep-alive timeout):
// the next POST is written into the closed connection, fails with
// ErrConnectionClosed or a reset, and since a POST is never sent twice, the
// hint is lost. So before the first write of a request into a connection
// that sat idle for more than probeIdle, hintConn asks the kernel, without
// waiting, whether the worker closed it; if so it writes nothing and fails
// with errIdleConnClosed, which the poster resends on a new connection: that
// request provably never left.
//
// And it cuts the connection short when the delivery's base context is
// cancelled (a drain past its deadline): its deadline goes to the past and
// stays there, whatever deadline fasthttp or crypto/tls set afterwards.
//
// A connection is used by one goroutine at a time (the dialler, then the
// post that holds it, then the pool's cleaner that closes it), handed over
// through fasthttp's pool lock, so last and wrote need no lock of their own.
type hintConn struct {
	net.Conn
	// last is when the connection was last read or written; wrote says the
	// last of those was a write: a request is going out, so the next write
	// belongs to it and must not be refused.
	last  time.Time
	wrote bool
	// cut is set once the base context is cancelled; stop unregisters the
	// hook that sets it.
	cut  atomic.Bool
	stop func() bool
	// release gives the connection back to the budget, once; nil when it
	// was dialled outside one.
	release  func()
	released atomic.Bool
}

// errIdleConnClosed is the refusal of a write into an idle connection the
// worker has closed; nothing was written.
var errIdleConnClosed = errors.New("the worker closed the idle connection; nothing was written")

// cutDeadline is a deadline in the past: every read and write fails at once.
var cutDeadline = time.Unix(1, 0)

// dialControl is a net.Dialer Control hook: the endpoint policy's check of
// the resolved address before connect.
type dialControl = func(network, address string, c syscall.RawConn) error

// dialHint dials a worker within timeout, through control (nil:
// endpoint.CheckDialAddress), which sees the address the name resolved
// to, so a name that resolves to a refused address (DNS rebinding to
// loopback) connects nowhere. It ties the connection to base.
func dialHint(base context.Context, addr string, timeout time.Duration, control dialControl) (*hintConn, error) {
	ctx, cancel := context.WithTimeout(base, timeout)
	defer cancel()
	if control == nil {
		control = endpoint.CheckDialAddress
	}
	d := net.Dialer{KeepAlive: 30 * time.Second, Control: control}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &hintConn{Conn: nc, last: time.Now()}
	c.stop = context.AfterFunc(base, func() {
		c.cut.Store(true)
		nc.SetDeadline(cutDeadline)
	})
	return c, nil
}

func (c *hintConn) Write(b []byte) (int, error) {
	if !c.wrote && time.Since(c.last) > probeIdle && c.peerClosed() {
		return 0, errIdleConnClosed
	}
	n, err := c.Conn.Write(b)
	c.last, c.wrote = time.Now(), true
	return n, err
}

func (c *hintConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.last, c.wrote = time.Now(), false
	return n, err
}

func (c *hintConn) Close() error {
	c.stop()
	if c.release != nil && !c.released.Swap(true) {
		c.release()
	}
	return c.Conn.Close()
}

func (c *hintConn) SetDeadline(t time.Time) error {
	return c.keepCut(c.Conn.SetDeadline(t))
}

func (c *hintConn) SetReadDeadline(t time.Time) error {
	return c.keepCut(c.Conn.SetReadDeadline(t))
}

func (c *hintConn) SetWriteDeadline(t time.Time) error {
	return c.keepCut(c.Conn.SetWriteDeadline(t))
}

// keepCut puts the deadline back in the past if the connection was cut:
// the hook stores cut before it sets the deadline, so whichever runs first,
// a cut connection ends with its deadline in the past.
func (c *hintConn) keepCut(err error) error {
	if c.cut.Load() {
		c.Conn.SetDeadline(cutDeadline)
	}
	return err
}

// peerClosed reports whether the idle connection has been closed, or
// written to, by the worker: unasked data makes it as unfit for the next
// hint as a close. The kernel is asked without waiting (peekClosed); where
// it cannot be, the connection is read with a deadline just ahead: an open,
// silent connection times out, a closed one reads EOF at once.
func (c *hintConn) peerClosed() bool {
	if closed, ok := peekClosed(c.Conn); ok {
		return closed
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Microsecond))
	var b [1]byte
	_, err := c.Conn.Read(b[:])
	return err == nil || !isTimeout(err)
}
