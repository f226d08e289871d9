package loadgen

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func decodeOptions(url string, rate float64, d time.Duration, conns int) Options {
	return Options{Target: url, Rate: rate, Duration: d, Connections: conns,
		Roles: []Role{{Name: "decode", Workers: []string{"d0"}}}, MaxTurns: 3, BlockSize: 16}
}

// TestRunChunkedAndClosing: answers written in chunks, and a server that
// closes the connection after every answer, are read correctly; the
// generator redials.
func TestRunChunkedAndClosing(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Connection", "close")
		w.Write([]byte(`{"actions":[{"action_id":"a1"},`))
		w.(http.Flusher).Flush() // forces chunked framing
		w.Write([]byte(`{"action_id":"a2"}]}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	res, err := Run(t.Context(), decodeOptions(srv.URL, 500, 200*time.Millisecond, 2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 100 || res.Errors != 0 || res.Hints != 100 || res.Actions != 200 {
		t.Fatalf("completed %d errors %d hints %d actions %d (%s)", res.Completed, res.Errors, res.Hints, res.Actions, res.FirstError)
	}
	if n := conns.Load(); n < 100 {
		t.Errorf("%d connections for 100 answers that each closed theirs", n)
	}
}

// TestRunKeepsConnectionsAlive: bookings share the keep-alive connections.
func TestRunKeepsConnectionsAlive(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/prefix/v1/bookings" || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "wrong request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	o := decodeOptions(srv.URL+"/prefix/", 1000, 300*time.Millisecond, 3)
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 300 || res.Errors != 0 || res.Hints != 0 {
		t.Fatalf("completed %d errors %d hints %d (%s)", res.Completed, res.Errors, res.Hints, res.FirstError)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want the 3 kept alive", n)
	}
	if len(res.SendLags) != res.Offered || res.SendLags[0] < 0 || !strings.Contains(res.Report(o), "send lag  p50 ") {
		t.Errorf("%d send lags for %d bookings; report:\n%s", len(res.SendLags), res.Offered, res.Report(o))
	}
}

// TestRunTimesFromSchedule: a server that stalls holds up the bookings
// scheduled behind it, and their latency counts the wait.
func TestRunTimesFromSchedule(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if n.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	// 50 bookings 10 ms apart on one connection: the first takes 300 ms,
	// so the next ~29 wait for it.
	res, err := Run(t.Context(), decodeOptions(srv.URL, 100, 500*time.Millisecond, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 50 {
		t.Fatalf("completed %d (%s)", res.Completed, res.FirstError)
	}
	late := 0
	for _, l := range res.Latencies {
		if l >= 100*time.Millisecond {
			late++
		}
	}
	if late < 20 {
		t.Errorf("%d bookings took 100 ms or more, want the 20 or so queued behind the stall; latencies %v", late, res.Latencies)
	}
	if res.Percentile(1) < 300*time.Millisecond {
		t.Errorf("max latency %s, want the stall's 300 ms", res.Percentile(1))
	}
}

// TestRunTimeout: an answer that never comes is an error after Timeout, and
// the run goes on.
func TestRunTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Content-Length") != "" && strings.Contains(r.Header.Get("User-Agent"), "loadgen") {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	}))
	defer srv.Close()
	o := decodeOptions(srv.URL, 100, 50*time.Millisecond, 5)
	o.Timeout = 100 * time.Millisecond
	start := time.Now()
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 5 || res.Completed != 0 || !strings.Contains(res.FirstError, "timeout") {
		t.Fatalf("errors %d completed %d first %q", res.Errors, res.Completed, res.FirstError)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("run took %s", d)
	}
}

// TestRunServerDown: every booking fails, with the dial error.
func TestRunServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	res, err := Run(t.Context(), decodeOptions("http://"+addr, 1000, 20*time.Millisecond, 2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 20 || res.Completed != 0 || !strings.Contains(res.FirstError, "refused") {
		t.Fatalf("errors %d completed %d first %q", res.Errors, res.Completed, res.FirstError)
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want target
		err  string
	}{
		{in: "http://127.0.0.1:9470", want: target{network: "tcp", addr: "127.0.0.1:9470", host: "127.0.0.1:9470"}},
		{in: "http://localhost/", want: target{network: "tcp", addr: "localhost:80", host: "localhost"}},
		{in: "http://[::1]:8/api/", want: target{network: "tcp", addr: "[::1]:8", host: "[::1]:8", path: "/api"}},
		{in: "unix:///run/kvhint/booking.sock", want: target{network: "unix", addr: "/run/kvhint/booking.sock", host: "localhost"}},
		{in: "unix://run/kvhint/booking.sock", err: "ABSOLUTE"},
		{in: "unix:///run/../booking.sock", err: "ABSOLUTE"},
		{in: "https://127.0.0.1:9470", err: "plain http"},
		{in: "127.0.0.1:9470", err: "target"},
	} {
		got, err := parseTarget(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestRunOverUnixSocket: a unix:///PATH target dials the socket, and its
// requests carry a valid Host header.
func TestRunOverUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "lg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "booking.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var hosts sync.Map
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts.Store(r.Host, true)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	res, err := Run(t.Context(), decodeOptions("unix://"+path, 1000, 50*time.Millisecond, 2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 50 || res.Errors != 0 {
		t.Fatalf("completed %d errors %d (%s)", res.Completed, res.Errors, res.FirstError)
	}
	hosts.Range(func(k, _ any) bool {
		if k != "localhost" {
			t.Errorf("Host %q, want localhost", k)
		}
		return true
	})
}

// TestRequestsMatchBodies: what a sender writes for each booking is a
// valid HTTP/1.1 request that carries the booking's body unchanged, to the
// target's path and Host.
func TestRequestsMatchBodies(t *testing.T) {
	o := Options{Roles: []Role{{Name: "prefill", Workers: []string{"p0", "p1"}, CopyRate: 0.5}, {Name: "decode", Workers: []string{"d0"}}},
		MaxTurns: 4, BlockSize: 16, Seed: 3}
	bodies := newStream(o).bodies(500)
	again := newStream(o).bodies(500)
	var req fasthttp.Request
	setBookingRequest(&req, target{network: "tcp", addr: "h:1", host: "h:1", path: "/a%2Fb"})
	var wire bytes.Buffer
	for i := range bodies {
		if !bytes.Equal(bodies[i], again[i]) {
			t.Fatalf("body %d differs between two streams of one seed", i)
		}
		wire.Reset()
		req.SetBodyRaw(bodies[i])
		if _, err := req.WriteTo(&wire); err != nil {
			t.Fatal(err)
		}
		got, err := http.ReadRequest(bufio.NewReader(&wire))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(got.Body)
		if string(b) != string(bodies[i]) || got.Host != "h:1" || got.URL.RawPath != "/a%2Fb/v1/bookings" || got.Method != "POST" ||
			got.Header.Get("Content-Type") != "application/json" || got.UserAgent() != userAgent {
			t.Fatalf("request %d: %s %s host %s headers %v body %s, want body %s", i, got.Method, got.URL, got.Host, got.Header, b, bodies[i])
		}
	}
}
