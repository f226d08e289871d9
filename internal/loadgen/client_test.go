package loadgen

import (
	"bufio"
	"errors"
	"fmt"
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

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		status int
		text   string
		body   string
		close  bool
		err    string
	}{
		{name: "content-length", in: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", status: 200, text: "200 OK", body: "hello"},
		{name: "header case", in: "HTTP/1.1 200 OK\r\ncontent-length:  3 \r\n\r\nabc", status: 200, text: "200 OK", body: "abc"},
		{name: "204 ignores length", in: "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", status: 204, text: "204 No Content"},
		{name: "304", in: "HTTP/1.1 304 Not Modified\r\n\r\n", status: 304, text: "304 Not Modified"},
		{name: "no reason", in: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", status: 200, text: "200"},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n", status: 200, text: "200 OK", body: "hello, world"},
		{name: "chunked beats length", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", status: 200, text: "200 OK", body: "0123456789"},
		{name: "interim 100", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", status: 201, text: "201 Created", body: "ok"},
		{name: "connection close", in: "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbad", status: 400, text: "400 Bad Request", body: "bad", close: true},
		{name: "close-delimited", in: "HTTP/1.1 200 OK\r\n\r\nuntil the end", status: 200, text: "200 OK", body: "until the end", close: true},
		{name: "http/1.0", in: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", status: 200, text: "200 OK", body: "x", close: true},
		{name: "http/1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx", status: 200, text: "200 OK", body: "x"},
		{name: "bare LF", in: "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", status: 200, text: "200 OK", body: "ok"},
		{name: "clean EOF", in: "", err: "EOF"},
		{name: "short body", in: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", err: "unexpected EOF"},
		{name: "cut headers", in: "HTTP/1.1 200 OK\r\nContent-Len", err: "unexpected EOF"},
		{name: "cut chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", err: "unexpected EOF"},
		{name: "bad chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", err: "chunk size"},
		{name: "chunk without CRLF", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n0\r\n\r\n", err: "CRLF"},
		{name: "gzip coding", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: "Transfer-Encoding"},
		{name: "bad status", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: "status line"},
		{name: "not HTTP", in: "SSH-2.0-OpenSSH\r\n", err: "status line"},
		{name: "bad length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "Content-Length"},
		{name: "conflicting lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", err: "Content-Length"},
		{name: "huge length", in: "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n", err: "limit"},
		{name: "header without colon", in: "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", err: "header line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 64)
			r, _, err := readResponse(br, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one that says %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.status != tc.status || r.statusText != tc.text || string(r.body) != tc.body || r.close != tc.close {
				t.Errorf("got %d %q body %q close %v; want %d %q body %q close %v", r.status, r.statusText, r.body, r.close, tc.status, tc.text, tc.body, tc.close)
			}
		})
	}
}

// TestReadResponsesInARow: answers on one connection are read one after the
// other, whatever their framing.
func TestReadResponsesInARow(t *testing.T) {
	in := "HTTP/1.1 204 No Content\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nde"
	br := bufio.NewReaderSize(strings.NewReader(in), 48)
	var buf []byte
	var got []string
	for {
		r, b, err := readResponse(br, buf)
		buf = b
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s", r.status, r.body))
	}
	if fmt.Sprint(got) != "[204: 200:abc 200:de]" {
		t.Errorf("got %v", got)
	}
}

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
	reqs := newStream(o).requests(500, requestHead("h:1", "/v1/bookings"))
	for i := range bodies {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(reqs[i]))))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(req.Body)
		if string(b) != string(bodies[i]) || req.Host != "h:1" || req.URL.Path != "/v1/bookings" || req.Method != "POST" {
			t.Fatalf("request %d: %s %s host %s body %s, want body %s", i, req.Method, req.URL, req.Host, b, bodies[i])
		}
	}
}

// FuzzReadResponse: no input panics the reader, and where net/http reads
// the same bytes as one complete answer, both agree on status and body.
func FuzzReadResponse(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	f.Add("HTTP/1.1 204 No Content\r\n\r\n")
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	f.Add("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nunknown role\n")
	f.Add("HTTP/1.0 200 OK\r\n\r\nbody")
	f.Fuzz(func(t *testing.T, in string) {
		ours, _, err := readResponse(bufio.NewReaderSize(strings.NewReader(in), 4096), nil)
		if err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(in)), nil)
		if err != nil {
			return
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return
		}
		if resp.StatusCode != ours.status {
			t.Fatalf("status %d, net/http %d", ours.status, resp.StatusCode)
		}
		if resp.StatusCode >= 200 && string(body) != string(ours.body) {
			t.Fatalf("body %q, net/http %q", ours.body, body)
		}
	})
}
