package loadgen

import (
	"bufio"
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

// TestRequestsMatchBodies: the pre-encoded requests carry the same
// bookings as bodies, each a valid HTTP/1.1 request.
func TestRequestsMatchBodies(t *testing.T) {
	o := Options{Roles: []Role{{Name: "prefill", Workers: []string{"p0", "p1"}, CopyRate: 0.5}, {Name: "decode", Workers: []string{"d0"}}},
		MaxTurns: 4, BlockSize: 16, Seed: 3}
	bodies := newStream(o).bodies(500)
	reqs, err := newStream(o).requests(500, target{network: "tcp", addr: "h:1", host: "h:1", path: "/a%2Fb"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range bodies {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(reqs[i]))))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(req.Body)
		if string(b) != string(bodies[i]) || req.Host != "h:1" || req.URL.RawPath != "/a%2Fb/v1/bookings" || req.Method != "POST" ||
			req.Header.Get("Content-Type") != "application/json" || req.UserAgent() != userAgent {
			t.Fatalf("request %d: %s %s host %s headers %v body %s, want body %s", i, req.Method, req.URL, req.Host, req.Header, b, bodies[i])
		}
	}
}

// TestRunAnswerFramings: answers framed every way HTTP/1.x allows are read
// whole, and a connection its answer ends is redialled.
func TestRunAnswerFramings(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		closes       bool // the server closes the connection after the answer
		errors       int
		firstError   string
	}{
		{name: "content-length", answer: "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{\"action_id\":\"a1\"}\n\n"},
		{name: "chunked with trailer", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"act\r\nD;ext=1\r\nion_id\":\"a1\"}\r\n0\r\nX-Checksum: 1\r\n\r\n"},
		{name: "interim 100", answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 18\r\n\r\n{\"action_id\":\"a1\"}"},
		{name: "no reason phrase", answer: "HTTP/1.1 200\r\nContent-Length: 18\r\n\r\n{\"action_id\":\"a1\"}"},
		{name: "close-delimited", answer: "HTTP/1.1 200 OK\r\n\r\n{\"action_id\":\"a1\"}", closes: true},
		{name: "http/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 18\r\n\r\n{\"action_id\":\"a1\"}", closes: true},
		{name: "http/1.0 keep-alive", answer: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 18\r\n\r\n{\"action_id\":\"a1\"}"},
		{name: "refused without reason", answer: "HTTP/1.1 429\r\nContent-Length: 10\r\n\r\nslow  down", errors: 20, firstError: "429: slow down"},
		{name: "not HTTP", answer: "SSH-2.0-OpenSSH\r\n", closes: true, errors: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						for {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							io.Copy(io.Discard, req.Body)
							if _, err := io.WriteString(c, tc.answer); err != nil || tc.closes {
								return
							}
						}
					}()
				}
			}()
			res, err := Run(t.Context(), decodeOptions("http://"+ln.Addr().String(), 1000, 20*time.Millisecond, 2))
			if err != nil {
				t.Fatal(err)
			}
			want := 20 - tc.errors
			if res.Completed != want || res.Errors != tc.errors || res.Hints != want || res.Actions != want {
				t.Errorf("completed %d errors %d hints %d actions %d (%s); want %d, %d, %d, %d", res.Completed, res.Errors, res.Hints, res.Actions, res.FirstError, want, tc.errors, want, want)
			}
			if tc.firstError != "" && res.FirstError != tc.firstError {
				t.Errorf("first error %q, want %q", res.FirstError, tc.firstError)
			}
		})
	}
}
