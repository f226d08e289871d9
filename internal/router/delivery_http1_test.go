package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/internal/simworker"
)

// Tests of the built-in HTTP/1.1 poster (h1Poster) that delivery uses for
// http:// endpoints when no Client is given.

func TestReadAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		code     int
		text     string
		keep     bool
		rest     string // what must be left unread: the next answer
		err      string
	}{
		{name: "204", in: "HTTP/1.1 204 No Content\r\nDate: x\r\n\r\nNEXT", code: 204, keep: true, rest: "NEXT"},
		{name: "200 with body", in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", code: 200, keep: true, rest: "NEXT"},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nNEXT", code: 200, keep: true, rest: "NEXT"},
		{name: "503 text", in: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusyNEXT", code: 503, text: "503 Service Unavailable", keep: true, rest: "NEXT"},
		{name: "interim", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nNEXT", code: 204, keep: true, rest: "NEXT"},
		{name: "connection close", in: "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", code: 204},
		{name: "http/1.0", in: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", code: 200},
		{name: "http/1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\nNEXT", code: 200, keep: true, rest: "NEXT"},
		{name: "close-delimited", in: "HTTP/1.1 200 OK\r\n\r\nuntil the end", code: 200},
		{name: "answer too large", in: "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n", code: 200},
		{name: "chunks too large", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20000\r\n", code: 200},
		{name: "eof", in: "", err: "EOF"},
		{name: "cut short", in: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", err: "unexpected EOF"},
		{name: "cut headers", in: "HTTP/1.1 204 No Content\r\nDa", err: "unexpected EOF"},
		{name: "not http", in: "SSH-2.0\r\n", err: "status line"},
		{name: "bad length", in: "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", err: "Content-Length"},
		{name: "gzip", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: "Transfer-Encoding"},
		{name: "bad chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", err: "chunk size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 64)
			st, keep, err := readAnswer(br)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one that says %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.code != tc.code || st.text != tc.text || keep != tc.keep {
				t.Errorf("got %d %q keep %v, want %d %q keep %v", st.code, st.text, keep, tc.code, tc.text, tc.keep)
			}
			if keep {
				rest, _ := io.ReadAll(br)
				if string(rest) != tc.rest {
					t.Errorf("left %q unread, want %q", rest, tc.rest)
				}
			}
		})
	}
}

// FuzzReadAnswer: no answer panics the reader; where net/http reads the
// same bytes as a complete answer whose body it can read, the status
// agrees, and a connection kept for reuse is left exactly at the end of
// the answer, as net/http leaves it.
func FuzzReadAnswer(f *testing.F) {
	f.Add("HTTP/1.1 204 No Content\r\n\r\n")
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
	f.Add("HTTP/1.0 500 Internal Server Error\r\n\r\nboom")
	f.Fuzz(func(t *testing.T, in string) {
		br := bufio.NewReaderSize(strings.NewReader(in), 4096)
		st, keep, err := readAnswer(br)
		if err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(in)), nil)
		if err != nil {
			return
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			return
		}
		if resp.StatusCode != st.code {
			t.Fatalf("status %d, net/http %d", st.code, resp.StatusCode)
		}
		if keep && resp.Close {
			t.Fatalf("kept a connection net/http would close")
		}
	})
}

// closingWorker is a simulated worker behind a wrapper that answers every
// hint with "Connection: close", counting connections.
func closingWorker(t *testing.T, wrap func(http.Handler) http.Handler, idle time.Duration) (*simworker.Worker, string, *atomic.Int64) {
	t.Helper()
	w := simworker.New(simworker.Options{ID: "w"})
	var conns atomic.Int64
	srv := &http.Server{Handler: wrap(w.Handler()), IdleTimeout: idle, ConnState: func(_ net.Conn, s http.ConnState) {
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

func sendOneByOne(t *testing.T, w *simworker.Worker, q *queue, n int, pause time.Duration) {
	t.Helper()
	for i := range n {
		q.enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
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
	eventually(t, 5*time.Second, func() error {
		if v := testutil.ToFloat64(m.hintsSent); v != float64(n) {
			return fmt.Errorf("hints_sent_total %v, want %d", v, n)
		}
		return nil
	})
	if v := testutil.ToFloat64(m.errTransport) + testutil.ToFloat64(m.errTimeout) + testutil.ToFloat64(m.errStatus); v != 0 {
		t.Errorf("%v delivery errors, want none", v)
	}
}

// TestH1PosterConnectionClose: a worker that closes after every answer
// gets every hint, each on a new connection.
func TestH1PosterConnectionClose(t *testing.T) {
	w, ep, conns := closingWorker(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Connection", "close")
			h.ServeHTTP(rw, r)
		})
	}, 0)
	m := NewMetrics()
	del := NewDelivery(DeliveryOptions{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.newQueue("w", ep)
	if q.h1 == nil {
		t.Fatal("an http:// endpoint without a Client should use the built-in poster")
	}
	sendOneByOne(t, w, q, 5, 0)
	waitSent(t, m, 5)
	if c := conns.Load(); c != 5 {
		t.Errorf("%d connections for 5 hints each answered with Connection: close", c)
	}
}

// TestH1PosterWorkerClosesIdle: a worker that closes idle connections
// after 100 ms still gets every hint: the poster sees the close before it
// reuses the connection.
func TestH1PosterWorkerClosesIdle(t *testing.T) {
	w, ep, conns := closingWorker(t, func(h http.Handler) http.Handler { return h }, 100*time.Millisecond)
	m := NewMetrics()
	del := NewDelivery(DeliveryOptions{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.newQueue("w", ep)
	sendOneByOne(t, w, q, 3, 300*time.Millisecond)
	waitSent(t, m, 3)
	if c := conns.Load(); c != 3 {
		t.Errorf("%d connections, want 3: each closed by the worker while idle", c)
	}
}

// TestH1PosterAnswers: a chunked answer keeps the connection; an answer
// over maxAnswerBytes is not read and closes it; neither is an error.
func TestH1PosterAnswers(t *testing.T) {
	var big atomic.Bool
	w, ep, conns := closingWorker(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			r.Body = io.NopCloser(strings.NewReader(""))
			if big.Load() {
				rw.Write(make([]byte, maxAnswerBytes+1))
				return
			}
			rw.Write([]byte("accepted"))
			rw.(http.Flusher).Flush() // chunked
			rw.Write([]byte(", thanks"))
		})
	}, 0)
	_ = w
	m := NewMetrics()
	del := NewDelivery(DeliveryOptions{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.newQueue("w", ep)
	send := func(n int) {
		for range n {
			before := testutil.ToFloat64(m.hintsSent)
			q.enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
			eventually(t, 5*time.Second, func() error {
				if testutil.ToFloat64(m.hintsSent) != before+1 {
					return fmt.Errorf("hint not sent")
				}
				return nil
			})
		}
	}
	send(3)
	if c := conns.Load(); c != 1 {
		t.Errorf("%d connections for 3 chunked answers, want 1", c)
	}
	big.Store(true)
	send(2)
	big.Store(false)
	send(1)
	waitSent(t, m, 6)
	if c := conns.Load(); c != 3 {
		t.Errorf("%d connections after 2 oversized answers and 1 more, want 3: each oversized one closes its connection", c)
	}
}

// TestH1PosterEndpoints: https endpoints and a given Client use net/http;
// a malformed endpoint fails its posts as transport errors.
func TestH1PosterEndpoints(t *testing.T) {
	m := NewMetrics()
	del := NewDelivery(DeliveryOptions{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	if q := del.newQueue("a", "http://127.0.0.1:1/v1/hints?x=1"); q.h1 == nil || string(q.h1.head[:len("POST /v1/hints?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n")]) != "POST /v1/hints?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n" {
		t.Errorf("http endpoint: poster %+v", q.h1)
	}
	if q := del.newQueue("b", "https://127.0.0.1:1/v1/hints"); q.h1 != nil {
		t.Error("an https endpoint should go to net/http")
	}
	if q := del.newQueue("e", "http://%zz/"); q.h1 == nil || q.h1.err == nil {
		t.Errorf("a malformed endpoint: poster %+v, want one that fails every post", q.h1)
	}
	withClient := NewDelivery(DeliveryOptions{Metrics: NewMetrics(), Client: http.DefaultClient, Log: testLogger(t)})
	t.Cleanup(func() { withClient.Close(context.Background()) })
	if q := withClient.newQueue("c", "http://127.0.0.1:1/v1/hints"); q.h1 != nil {
		t.Error("a given Client should post every hint")
	}
	q := del.newQueue("d", "http://127.0.0.1:1/v1/hints")
	q.enqueue([]byte("{}"), time.Now()) // nothing listens on port 1
	eventually(t, 5*time.Second, func() error {
		if v := testutil.ToFloat64(m.errTransport); v != 1 {
			return fmt.Errorf("transport errors %v, want 1", v)
		}
		return nil
	})
}

// TestH1PosterAnswerCutShort: a worker that answers 2xx and then closes
// before the end of the body it announced got the hint; as through
// net/http (whose body errors post ignores), it counts as sent, not as a
// failed post.
func TestH1PosterAnswerCutShort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.Copy(io.Discard, req.Body)
				}
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
			}()
		}
	}()
	ep := "http://" + ln.Addr().String() + simworker.HintPath
	for _, tc := range []struct {
		name   string
		client *http.Client
	}{{"h1", nil}, {"net/http", NewHintClient(5 * time.Second)}} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics()
			del := NewDelivery(DeliveryOptions{Metrics: m, Client: tc.client, Log: testLogger(t)})
			t.Cleanup(func() { del.Close(context.Background()) })
			q := del.newQueue("w", ep)
			q.enqueue([]byte(message("m", staticJSON(1, "x"))), time.Now())
			waitSent(t, m, 1)
		})
	}
}

// TestH1PosterSchemeCase: the scheme of an endpoint is case-insensitive,
// as url.Parse and net/http read it: HTTPS:// goes to net/http, HTTP:// to
// the built-in poster.
func TestH1PosterSchemeCase(t *testing.T) {
	del := NewDelivery(DeliveryOptions{Metrics: NewMetrics(), Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	if q := del.newQueue("a", "HTTPS://127.0.0.1:1/v1/hints"); q.h1 != nil {
		t.Errorf("an HTTPS:// endpoint went to the built-in poster (err %v)", q.h1.err)
	}
	if q := del.newQueue("b", "HTTP://127.0.0.1:1/v1/hints"); q.h1 == nil || q.h1.err != nil {
		t.Errorf("an HTTP:// endpoint: poster %+v", q.h1)
	}
}
