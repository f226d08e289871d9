package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// stallBookings opens n connections to the booking API that each send a
// request head declaring a body of declared bytes, then one byte of it, and
// stall. They close when the test ends.
func stallBookings(t *testing.T, addr string, n int, declared int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	head := fmt.Sprintf("POST /v1/bookings HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", declared)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// TestStalledBookingsDoNotPreallocate: bookings that declare a 1 MiB body
// and send one byte of it cost what arrived, not what was declared. Before
// the fix readBody allocated Content-Length up front: 64 such bookings held
// 64 MiB (1,000 held 1.08 GB).
func TestStalledBookingsDoNotPreallocate(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	const n = 64
	before := heapInUse()
	stallBookings(t, s.BookingAddr(), n, dispatch.DefaultMaxBookingBytes)
	// Each handler is reading its body once the server has seen n
	// requests; give them the time a preallocation would take, and check
	// the heap stays low all along.
	const bound = 16 << 20
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if grown := int64(heapInUse()) - int64(before); grown > bound {
			t.Fatalf("%d stalled bookings declaring %d bytes grew the heap by %d MiB, over %d MiB", n, dispatch.DefaultMaxBookingBytes, grown>>20, bound>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d stalled bookings declaring 1 MiB: heap grew by %d KiB", n, (int64(heapInUse())-int64(before))>>10)
}

// TestOversizeBookingRefusedAtOnce: a booking whose Content-Length is over
// the limit is answered 413 as soon as its body starts, without waiting for
// more of it, and counted; the connection is closed after the answer.
func TestOversizeBookingRefusedAtOnce(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	c := stallBookings(t, s.BookingAddr(), 1, 2*dispatch.DefaultMaxBookingBytes)[0]
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a booking declared over the limit: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close || !strings.Contains(string(b), booking.MaxBookingBytesFlag) {
		t.Errorf("got %d (close %v) %s, want 413, closed, naming %s", resp.StatusCode, resp.Close, b, booking.MaxBookingBytesFlag)
	}
	if n := gathered(t, s.Metrics, dispatchmetrics.Namespace+"_booking_errors_total", map[string]string{"reason": "too_large"}); n != 1 {
		t.Errorf("too_large booking errors = %v, want 1", n)
	}
}

// TestOversizeBookingExpectContinue: a booking that asks "Expect:
// 100-continue" for a body over the limit is refused with 413 at once and
// counted; it is never invited to send the body. Before the fix the server
// answered 100 Continue, and a client that then waited got 408, uncounted.
func TestOversizeBookingExpectContinue(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	c, err := net.Dial("tcp", s.BookingAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/bookings HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", 2*dispatch.DefaultMaxBookingBytes)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a booking declared over the limit: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("got %d (close %v), want 413 and the connection closed, without 100 Continue first", resp.StatusCode, resp.Close)
	}
	if n := gathered(t, s.Metrics, dispatchmetrics.Namespace+"_booking_errors_total", map[string]string{"reason": "too_large"}); n != 1 {
		t.Errorf("too_large booking errors = %v, want 1", n)
	}
	// A body within the limit is invited as before.
	c2, err := net.Dial("tcp", s.BookingAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "POST /v1/bookings HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c2).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Errorf("a body within the limit: first answer line %q (%v), want 100 Continue", line, err)
	}
}

// TestTricklingBookingTimesOut: a body still arriving when the read
// timeout passes is answered 408 and the connection closed; the booking
// is not counted as invalid. Before the fix it was a 400 counted invalid.
func TestTricklingBookingTimesOut(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) { o.ReadTimeout = 300 * time.Millisecond })
	c := stallBookings(t, s.BookingAddr(), 1, 100)[0]
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a booking whose body stalled: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("got %d (close %v), want 408 and the connection closed", resp.StatusCode, resp.Close)
	}
	if n := gathered(t, s.Metrics, dispatchmetrics.Namespace+"_booking_errors_total", map[string]string{"reason": "invalid"}); n != 0 {
		t.Errorf("invalid booking errors = %v, want 0: a slow client's booking is not invalid", n)
	}
}

// TestOversizeBookingAnswerReachesClient: a client still sending a body
// over the limit reads the 413 sent before the body was read, rather than
// a connection reset: the sidecar stops writing and reads on for a while
// before it closes. Without that, about one in ten such bookings failed.
func TestOversizeBookingAnswerReachesClient(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	body := bytes.Repeat([]byte("1"), 4*dispatch.DefaultMaxBookingBytes)
	for i := range 20 {
		resp, err := http.Post("http://"+s.BookingAddr()+"/v1/bookings", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("booking %d of %d bytes: %v", i, len(body), err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("booking %d: status %d, want 413", i, resp.StatusCode)
		}
	}
}

// closedWithin reads c until the server closes it or d passes; it
// reports whether the server closed it.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

func httpGet(t *testing.T, url string) (int, error) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestServersHaveLimits is the report's trickling attack, scaled down: 200
// clients that send a booking's head and one byte of its body, against a
// booking listener capped at 32 connections with a 500 ms read timeout.
// The connections over the cap are refused and counted; the held ones are
// cut at the read timeout; goroutines stay bounded by the cap; /metrics on
// the ops listener answers all along; a booking after the attack is
// served at once. Then the same against the ops listener. Before the fix
// all 200 connections were held (about 400 goroutines) with no timeout.
func TestServersHaveLimits(t *testing.T) {
	const capBooking, capOps, attackers = 32, 8, 200
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) {
		o.MaxBookingConns, o.MaxOpsConns = capBooking, capOps
		o.ReadTimeout = 500 * time.Millisecond
	})
	refused := func(listener string) float64 {
		return gathered(t, s.Metrics, dispatchmetrics.Namespace+"_connections_refused_total", map[string]string{"listener": listener})
	}
	g0 := runtime.NumGoroutine()
	start := time.Now()
	conns := stallBookings(t, s.BookingAddr(), attackers, 100)
	testenv.Eventually(t, 5*time.Second, "the booking connections over the cap refused", func(context.Context) error {
		if n := refused("booking"); n < attackers-capBooking {
			return fmt.Errorf("%v connections refused, want at least %d", n, attackers-capBooking)
		}
		return nil
	})
	if g := runtime.NumGoroutine() - g0; g > 2*capBooking+16 {
		t.Errorf("%d trickling clients hold %d goroutines, over 2 per allowed connection (%d)", attackers, g, 2*capBooking+16)
	}
	if code, err := httpGet(t, "http://"+s.OpsAddr()+"/metrics"); err != nil || code != 200 {
		t.Errorf("/metrics during the booking attack: %d %v", code, err)
	}
	for i, c := range conns {
		if !closedWithin(c, 2*time.Second) {
			t.Fatalf("trickling connection %d still open %v after the attack began", i, time.Since(start))
		}
	}
	bookStart := time.Now()
	if resp := post(t, s, "/v1/bookings", bookingJSON("after", "decode", "w", "")); resp.status >= 500 {
		t.Errorf("booking after the attack: %d %s", resp.status, resp.body)
	}
	if d := time.Since(bookStart); d > time.Second {
		t.Errorf("a booking after the attack took %v", d)
	}

	// The ops listener: idle connections that never send a request.
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range 50 {
		c, err := net.Dial("tcp", s.OpsAddr())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	testenv.Eventually(t, 5*time.Second, "the ops connections over the cap refused", func(context.Context) error {
		if n := refused("ops"); n < 50-capOps {
			return fmt.Errorf("%v ops connections refused, want at least %d", n, 50-capOps)
		}
		return nil
	})
	testenv.Eventually(t, 3*time.Second, "the metrics answered after idle connections", func(context.Context) error {
		code, err := httpGet(t, "http://"+s.OpsAddr()+"/metrics")
		if err != nil || code != 200 {
			return fmt.Errorf("/metrics after idle connections: %d %v", code, err)
		}
		return nil
	})

	// A head over the header limit is refused.
	c, err := net.Dial("tcp", s.BookingAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/bookings HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 64<<10))
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, "431") {
		t.Errorf("a 64 KiB header got %q, want 431", line)
	}
}

// TestOpsListenDefaults: the ops listener is not on every interface by
// default, and pprof is on loopback only, never on the ops listener.
func TestOpsListenDefaults(t *testing.T) {
	host, _, err := net.SplitHostPort(DefaultOpsListen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("DefaultOpsListen = %q, want a loopback address (pods give $POD_IP)", DefaultOpsListen)
	}
	if got := OpsListenFor("10.1.2.3"); got != "10.1.2.3:8791" {
		t.Errorf("OpsListenFor(pod IP) = %q", got)
	}
	if got := OpsListenFor("fd00::3"); got != "[fd00::3]:8791" {
		t.Errorf("OpsListenFor(IPv6 pod IP) = %q", got)
	}
	if _, err := New(Options{Catalog: testCatalog(t), ConfigFile: "x", Pprof: true, PprofListen: "0.0.0.0:6060"}); err == nil {
		t.Error("pprof on every interface was accepted")
	}
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) {
		o.Pprof, o.PprofListen = true, "127.0.0.1:0"
	})
	if code, _ := httpGet(t, "http://"+s.OpsAddr()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on the ops listener: %d, want 404", code)
	}
	if s.PprofAddr() == "" {
		t.Fatal("no pprof listener")
	}
	if code, err := httpGet(t, "http://"+s.PprofAddr()+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("pprof on its loopback listener: %d %v", code, err)
	}
}
