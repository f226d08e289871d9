package delivery

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// Tests of the poster: the fasthttp HostClient each queue posts through,
// against real servers on loopback.

// closingWorker is a simulated worker "w" behind a wrapper (nil: none),
// whose server closes connections idle for idle (0: never) and counts the
// connections it takes. It returns the worker, its hint endpoint and the
// count.
func closingWorker(t *testing.T, wrap func(http.Handler) http.Handler, idle time.Duration) (*simworker.Worker, string, *atomic.Int64) {
	t.Helper()
	w := simworker.New(simworker.Options{ID: "w"})
	h := w.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	var conns atomic.Int64
	srv := &http.Server{Handler: h, IdleTimeout: idle, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return w, "http://" + ln.Addr().String() + simworker.HintPath, &conns
}

func sendOneByOne(t *testing.T, w *simworker.Worker, q *Queue, n int, pause time.Duration) {
	t.Helper()
	for i := range n {
		q.Enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := w.WaitForHints(ctx, i+1); err != nil {
			t.Fatal(err)
		}
		cancel()
		time.Sleep(pause)
	}
}

func waitSent(t *testing.T, m *Metrics, n int) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "every hint sent", func(context.Context) error {
		if v := testutil.ToFloat64(m.hintsSent); v != float64(n) {
			return fmt.Errorf("hints_sent_total %v, want %d", v, n)
		}
		return nil
	})
	if v := testutil.ToFloat64(m.errTransport) + testutil.ToFloat64(m.errTimeout) + testutil.ToFloat64(m.errStatus); v != 0 {
		t.Errorf("%v delivery errors, want none", v)
	}
}

// rawWorker is a worker written by hand, for the answers a Go server does
// not give: it reads each request and writes answer(n) for the n-th (from
// 1), then closes the connection if closeAfter. It counts connections and
// requests.
type rawWorker struct {
	ep              string
	conns, requests atomic.Int64
}

func startRawWorker(t *testing.T, answer func(n int64) string, closeAfter bool) *rawWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rw := &rawWorker{ep: "http://" + ln.Addr().String() + simworker.HintPath}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rw.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := c.Write([]byte(answer(rw.requests.Add(1)))); err != nil || closeAfter {
						return
					}
				}
			}()
		}
	}()
	return rw
}

// TestPosterConnectionClose: a worker that closes after every answer
// gets every hint, each on a new connection.
func TestPosterConnectionClose(t *testing.T) {
	w, ep, conns := closingWorker(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Connection", "close")
			h.ServeHTTP(rw, r)
		})
	}, 0)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", ep)
	sendOneByOne(t, w, q, 5, 0)
	waitSent(t, m, 5)
	if c := conns.Load(); c != 5 {
		t.Errorf("%d connections for 5 hints each answered with Connection: close", c)
	}
}

// TestPosterRawAnswers: answers a Go server does not give, each to two
// hints: how each counts, and whether it keeps the connection.
func TestPosterRawAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     string
		closeAfter bool
		// sent, refused and failed are the hints counted as sent, as
		// status errors and as transport errors.
		sent, refused, failed float64
		conns                 int64
	}{
		{name: "interim answer", answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", sent: 2, conns: 1},
		{name: "http/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", sent: 2, conns: 2},
		{name: "http/1.0 keep-alive", answer: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", sent: 2, conns: 1},
		{name: "close-delimited", answer: "HTTP/1.1 200 OK\r\n\r\nuntil the end", closeAfter: true, sent: 2, conns: 2},
		{name: "refused", answer: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", refused: 2, conns: 1},
		{name: "not http", answer: "SSH-2.0-OpenSSH\r\n", closeAfter: true, failed: 2, conns: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rw := startRawWorker(t, func(int64) string { return tc.answer }, tc.closeAfter)
			m := NewMetrics(prometheus.NewRegistry())
			del := New(Options{Metrics: m, Log: testLogger(t)})
			t.Cleanup(func() { del.Close(context.Background()) })
			q := del.NewQueue("w", rw.ep)
			for i := range 2 {
				q.Enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
				testenv.Eventually(t, 5*time.Second, "every hint posted", func(context.Context) error {
					if n := testutil.ToFloat64(m.hintsSent) + testutil.ToFloat64(m.errStatus) + testutil.ToFloat64(m.errTransport) + testutil.ToFloat64(m.errTimeout); n != float64(i+1) {
						return fmt.Errorf("%v of %d hints posted", n, i+1)
					}
					return nil
				})
			}
			if sent, refused, failed := testutil.ToFloat64(m.hintsSent), testutil.ToFloat64(m.errStatus), testutil.ToFloat64(m.errTransport); sent != tc.sent || refused != tc.refused || failed != tc.failed {
				t.Errorf("sent %v, refused %v, failed %v; want %v, %v, %v", sent, refused, failed, tc.sent, tc.refused, tc.failed)
			}
			if c := rw.conns.Load(); c != tc.conns {
				t.Errorf("%d connections for 2 hints, want %d", c, tc.conns)
			}
			if r := rw.requests.Load(); r != 2 {
				t.Errorf("the worker read %d requests, want 2", r)
			}
		})
	}
}

// TestPosterWorkerClosesIdle: a worker that closes idle connections
// after 100 ms still gets every hint: hintConn sees the close before the
// next post is written into the connection. Without it, the post after
// each pause is lost.
func TestPosterWorkerClosesIdle(t *testing.T) {
	w, ep, conns := closingWorker(t, nil, 100*time.Millisecond)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", ep)
	sendOneByOne(t, w, q, 3, 300*time.Millisecond)
	waitSent(t, m, 3)
	if c := conns.Load(); c != 3 {
		t.Errorf("%d connections, want 3: each closed by the worker while idle", c)
	}
}

// TestPosterAnswers: a chunked answer keeps the connection, and so does
// one of exactly maxAnswerBytes; one over maxAnswerBytes is not read and
// closes it; none of them is an error.
func TestPosterAnswers(t *testing.T) {
	var size atomic.Int64 // 0: a small chunked answer
	_, ep, conns := closingWorker(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if n := size.Load(); n > 0 {
				rw.Header().Set("Content-Length", strconv.FormatInt(n, 10))
				rw.Write(make([]byte, n))
				return
			}
			rw.Write([]byte("accepted"))
			rw.(http.Flusher).Flush() // chunked
			rw.Write([]byte(", thanks"))
		})
	}, 0)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", ep)
	send := func(n int) {
		for range n {
			before := testutil.ToFloat64(m.hintsSent)
			q.Enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
			testenv.Eventually(t, 5*time.Second, "the hint sent", func(context.Context) error {
				if testutil.ToFloat64(m.hintsSent) != before+1 {
					return fmt.Errorf("hint not sent")
				}
				return nil
			})
		}
	}
	send(3)
	size.Store(maxAnswerBytes)
	send(1)
	if c := conns.Load(); c != 1 {
		t.Errorf("%d connections for 3 chunked answers and one of maxAnswerBytes, want 1", c)
	}
	size.Store(maxAnswerBytes + 1)
	send(2)
	size.Store(0)
	send(1)
	waitSent(t, m, 7)
	if c := conns.Load(); c != 3 {
		t.Errorf("%d connections after 2 oversized answers and 1 more, want 3: each oversized one closes its connection", c)
	}
}

// TestPosterRequest: the request a worker reads is the endpoint's path and
// query as given, its host, and the hint as a JSON body.
func TestPosterRequest(t *testing.T) {
	type seen struct {
		method, uri, host, ctype, agent, body string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("Content-Type"), r.Header.Get("User-Agent"), string(b)}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", srv.URL+"/v1//hints?x=1")
	msg := message("m", staticJSON(1, "x"))
	q.Enqueue([]byte(msg), time.Now())
	select {
	case s := <-got:
		want := seen{"POST", "/v1//hints?x=1", strings.TrimPrefix(srv.URL, "http://"), "application/json", userAgent, msg}
		if s != want {
			t.Errorf("the worker read\n%+v\nwant\n%+v", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no hint arrived")
	}
	waitSent(t, m, 1)
}

// TestPosterEndpoints: https endpoints get a TLS client; a malformed
// endpoint, or one of another scheme, fails its posts as transport errors,
// and so does a post to a port nobody listens on.
func TestPosterEndpoints(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	if q := del.NewQueue("a", "http://127.0.0.1:1/v1/hints?x=1"); q.p.err != nil || q.p.hc.IsTLS || q.p.hc.Addr != "127.0.0.1:1" {
		t.Errorf("http endpoint: err %v, TLS %v, addr %q", q.p.err, q.p.hc.IsTLS, q.p.hc.Addr)
	}
	if q := del.NewQueue("b", "https://worker.example/v1/hints"); q.p.err != nil || !q.p.hc.IsTLS || q.p.hc.Addr != "worker.example:443" {
		t.Errorf("https endpoint: err %v, TLS %v, addr %q", q.p.err, q.p.hc.IsTLS, q.p.hc.Addr)
	}
	if q := del.NewQueue("c", "http://[::1]/v1/hints"); q.p.err != nil || q.p.hc.Addr != "[::1]:80" {
		t.Errorf("http endpoint without a port: err %v, addr %q", q.p.err, q.p.hc.Addr)
	}
	for i, ep := range []string{"http://%zz/", "ftp://127.0.0.1:1/v1/hints", "http:///v1/hints"} {
		q := del.NewQueue(fmt.Sprint("e", i), ep)
		if q.p.err == nil {
			t.Errorf("%s: want a poster that fails every post", ep)
		}
		q.Enqueue([]byte("{}"), time.Now())
	}
	q := del.NewQueue("d", "http://127.0.0.1:1/v1/hints")
	q.Enqueue([]byte("{}"), time.Now()) // nothing listens on port 1
	testenv.Eventually(t, 5*time.Second, "four transport errors", func(context.Context) error {
		if v := testutil.ToFloat64(m.errTransport); v != 4 {
			return fmt.Errorf("transport errors %v, want 4", v)
		}
		return nil
	})
}

// TestPosterAnswerCutShort: a worker that answers 2xx and then closes
// before the end of the body it announced got the hint; it counts as sent,
// not as a failed post, and the next hint goes on a new connection.
func TestPosterAnswerCutShort(t *testing.T) {
	rw := startRawWorker(t, func(int64) string { return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc" }, true)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", rw.ep)
	q.Enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
	waitSent(t, m, 1)
	q.Enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
	waitSent(t, m, 2)
	if c := rw.conns.Load(); c != 2 {
		t.Errorf("%d connections, want 2", c)
	}
}

// TestPosterNoResend: a worker that reads a hint and closes without an
// answer gets it once: the failed post is counted, not sent again.
func TestPosterNoResend(t *testing.T) {
	rw := startRawWorker(t, func(int64) string { return "" }, true)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", rw.ep)
	q.Enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
	testenv.Eventually(t, 5*time.Second, "one transport error", func(context.Context) error {
		if v := testutil.ToFloat64(m.errTransport); v != 1 {
			return fmt.Errorf("transport errors %v, want 1", v)
		}
		return nil
	})
	// The post returned with its error: a resend would have gone out before.
	if n := rw.requests.Load(); n != 1 {
		t.Errorf("the worker read %d requests for one hint, want 1", n)
	}
}

// TestPosterSchemeCase: the scheme of an endpoint is case-insensitive, as
// url.Parse reads it; fasthttp alone would refuse HTTP://.
func TestPosterSchemeCase(t *testing.T) {
	w, ep, _ := closingWorker(t, nil, 0)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	if q := del.NewQueue("a", "HTTPS://127.0.0.1:1/v1/hints"); q.p.err != nil || !q.p.hc.IsTLS {
		t.Errorf("an HTTPS:// endpoint: err %v, TLS %v", q.p.err, q.p.hc.IsTLS)
	}
	q := del.NewQueue("b", "HTTP://"+strings.TrimPrefix(ep, "http://"))
	sendOneByOne(t, w, q, 1, 0)
	waitSent(t, m, 1)
}

// tlsWorker is a simulated worker over TLS whose server closes connections
// idle for idle (0: never) and counts the connections it takes; the
// delivery trusts its certificate.
func tlsWorker(t *testing.T, del *Delivery, idle time.Duration) (*simworker.Worker, string, *atomic.Int64) {
	t.Helper()
	w := simworker.New(simworker.Options{ID: "w"})
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(w.Handler())
	srv.Config.IdleTimeout = idle
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	del.tlsRoots = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return w, srv.URL + simworker.HintPath, &conns
}

// TestPosterTLS: hints to an https:// worker share one connection, and a
// worker that closes idle TLS connections still gets every hint: the check
// runs beneath TLS, and the refusal reaches the retry rule through it.
func TestPosterTLS(t *testing.T) {
	for _, tc := range []struct {
		name  string
		idle  time.Duration
		pause time.Duration
		conns int64
	}{
		{"keep-alive", 0, 0, 1},
		{"worker closes idle", 100 * time.Millisecond, 300 * time.Millisecond, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics(prometheus.NewRegistry())
			del := New(Options{Metrics: m, Timeout: time.Second, Log: testLogger(t)})
			t.Cleanup(func() { del.Close(context.Background()) })
			w, ep, conns := tlsWorker(t, del, tc.idle)
			q := del.NewQueue("w", ep)
			sendOneByOne(t, w, q, 3, tc.pause)
			waitSent(t, m, 3)
			if c := conns.Load(); c != tc.conns {
				t.Errorf("%d connections, want %d", c, tc.conns)
			}
		})
	}
}

// TestPosterTLSUntrusted: a worker whose certificate the system roots do
// not vouch for gets nothing; the post is a transport error.
func TestPosterTLSUntrusted(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		t.Error("a hint went to an untrusted worker")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake fails, as it should
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", srv.URL+simworker.HintPath)
	q.Enqueue([]byte("{}"), time.Now())
	testenv.Eventually(t, 5*time.Second, "one transport error", func(context.Context) error {
		if v := testutil.ToFloat64(m.errTransport); v != 1 {
			return fmt.Errorf("transport errors %v, want 1", v)
		}
		return nil
	})
}
