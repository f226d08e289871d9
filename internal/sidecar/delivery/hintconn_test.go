package delivery

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// hintConnPair dials a listener through dialHint and returns both ends.
func hintConnPair(t *testing.T, base context.Context) (*hintConn, net.Conn) {
	t.Helper()
	return connPair(t, func(addr string) (*hintConn, error) { return dialHint(base, addr, 5*time.Second, nil) })
}

// connPair dials a new loopback listener with dial and returns the dialled
// end and the accepted one, both closed when the test ends.
func connPair[C net.Conn](t *testing.T, dial func(addr string) (C, error)) (C, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// readNothing checks that nothing arrived on s.
func readNothing(t *testing.T, s net.Conn) {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [64]byte
	if n, err := s.Read(b[:]); n > 0 || !isTimeout(err) {
		t.Errorf("the worker read %q (%v), want nothing", b[:n], err)
	}
}

// TestHintConnIdleCheck: the first write of a request into a connection
// idle past probeIdle is refused, with nothing written, if the worker has
// closed it or written to it unasked; an open, silent one is written to,
// and so is the rest of a request under way.
func TestHintConnIdleCheck(t *testing.T) {
	idle := func(c *hintConn) { c.last = time.Now().Add(-2 * probeIdle) }
	// waitUnfit waits for the worker's close or bytes to reach the socket.
	waitUnfit := func(c *hintConn) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, "the worker's close seen", func(context.Context) error {
			if !c.peerClosed() {
				return errors.New("the worker's close or data has not arrived")
			}
			return nil
		})
	}

	// The worker's side of the first pair stays silent.
	c, _ := hintConnPair(t, context.Background())
	idle(c)
	if _, err := c.Write([]byte("POST")); err != nil {
		t.Fatalf("write into an open, silent idle connection: %v", err)
	}

	c, s := hintConnPair(t, context.Background())
	s.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	waitUnfit(c)
	idle(c)
	if _, err := c.Write([]byte("POST")); !errors.Is(err, errIdleConnClosed) {
		t.Fatalf("write into an idle connection the worker wrote to: %v, want errIdleConnClosed", err)
	}
	readNothing(t, s)

	// A request under way is written whole: the check is for its start.
	c, s = hintConnPair(t, context.Background())
	if _, err := c.Write([]byte("POST")); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	waitUnfit(c)
	idle(c)
	if _, err := c.Write([]byte(" /v1/hints")); err != nil {
		t.Errorf("the rest of a request was refused: %v", err)
	}

	c, s = hintConnPair(t, context.Background())
	s.Close()
	waitUnfit(c)
	idle(c)
	if _, err := c.Write([]byte("POST")); !errors.Is(err, errIdleConnClosed) {
		t.Fatalf("write into an idle connection the worker closed: %v, want errIdleConnClosed", err)
	}
}

// TestHintConnCut: once the base context is cancelled, I/O fails at once,
// whatever deadline is set afterwards, and no new connection is dialled.
func TestHintConnCut(t *testing.T) {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := hintConnPair(t, base)
	c.SetDeadline(time.Now().Add(time.Hour))
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !isTimeout(err) {
			t.Errorf("read in flight: %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read in flight outlived the cancellation")
	}
	c.SetReadDeadline(time.Now().Add(time.Hour))
	start := time.Now()
	var b [1]byte
	if _, err := c.Read(b[:]); !isTimeout(err) || time.Since(start) > time.Second {
		t.Errorf("read after a new deadline: %v after %v, want an immediate timeout", err, time.Since(start))
	}
	if _, err := dialHint(base, c.RemoteAddr().String(), time.Second, nil); err == nil {
		t.Error("dialled with a cancelled base context")
	}
}

// TestDialHintRefused: every dial goes through endpoint.CheckDialAddress; the
// check runs before connect, so no packet leaves.
func TestDialHintRefused(t *testing.T) {
	for _, addr := range []string{"169.254.169.254:80", "0.0.0.0:1"} {
		if _, err := dialHint(context.Background(), addr, time.Second, nil); !errors.Is(err, endpoint.ErrRefusedAddress) {
			t.Errorf("dial to %s: %v, want ErrRefusedAddress", addr, err)
		}
	}
}

// TestDialHintChecksResolvedAddress: the dialer's hook sees the address a
// name resolves to, so a worker whose name resolves to loopback when it is
// dialled (DNS rebinding; localhost stands in for the rebound name here)
// connects nowhere under a policy that refuses loopback: the listener on
// loopback accepts nothing.
func TestDialHintChecksResolvedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	strict := &endpoint.Policy{}
	for _, addr := range []string{"localhost:" + port, ln.Addr().String()} {
		if _, err := dialHint(context.Background(), addr, time.Second, strict.CheckDial); !errors.Is(err, endpoint.ErrRefusedAddress) {
			t.Errorf("dial %s: %v, want ErrRefusedAddress", addr, err)
		}
	}
	// The same listener under a development policy is reached.
	c, err := dialHint(context.Background(), ln.Addr().String(), time.Second, (&endpoint.Policy{AllowLoopback: true}).CheckDial)
	if err != nil {
		t.Fatalf("development policy: %v", err)
	}
	c.Close()
	ln.Close()
	if n := accepted.Load(); n > 1 {
		t.Errorf("the loopback listener accepted %d connections, want only the development one", n)
	}
}
