package simworker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sinkServer serves a sink worker without net/http's server: a throughput
// run wants the worker to cost as little CPU as possible, since it shares
// the machine with the sidecar it measures, and net/http's per-request
// machinery (a background read goroutine, deadline resets, a response
// writer with its own buffers) cost more than the worker's work. Requests
// are parsed by http.ReadRequest, so any HTTP/1.1 request is read
// correctly (Content-Length or chunked bodies); POST /v1/hints is answered
// in place, with one write, and every other request goes to the worker's
// Handler through a recorder, answered with a Content-Length.
type sinkServer struct {
	w  *Worker
	ln net.Listener
	h  http.Handler

	mu sync.Mutex
	// conns are the open connections, true while one carries a request.
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func startSink(w *Worker, ln net.Listener) *sinkServer {
	s := &sinkServer{w: w, ln: ln, h: w.Handler(), conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	return s
}

func (s *sinkServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = false
		s.wg.Add(1)
		s.mu.Unlock()
		go s.conn(c)
	}
}

// close stops the server and drops its connections.
func (s *sinkServer) close() error {
	s.mu.Lock()
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// shutdown stops accepting and waits, until ctx is done, for requests in
// progress; it then drops the connections.
func (s *sinkServer) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	err := s.ln.Close()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		// Idle connections wait in a read; a deadline now ends them.
		// Those carrying a request end once it is answered.
		s.mu.Lock()
		for c, active := range s.conns {
			if !active {
				c.SetReadDeadline(time.Now())
			}
		}
		s.mu.Unlock()
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.close()
		<-done
		return ctx.Err()
	}
	return err
}

var (
	answerContinue = []byte("HTTP/1.1 100 Continue\r\n\r\n")
	answer204      = []byte("HTTP/1.1 204 No Content\r\n\r\n")
)

func (s *sinkServer) conn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	br := bufio.NewReaderSize(c, 32<<10)
	buf := make([]byte, 32<<10)
	var out []byte
	for {
		// Idle until a request starts; then it is served even if a
		// shutdown began meanwhile, as net/http's Server does.
		if _, err := br.Peek(1); err != nil || !s.setActive(c, true) {
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !isTimeout(err) {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
			}
			return
		}
		keep := !req.Close
		if req.Method == http.MethodPost && req.URL.Path == HintPath {
			if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
				if _, err := c.Write(answerContinue); err != nil {
					return
				}
			}
			out, keep = s.hint(req, buf, out[:0], keep)
		} else {
			out, keep = s.other(req, out[:0], keep)
		}
		if _, err := c.Write(out); err != nil || !keep || !s.setActive(c, false) {
			return
		}
	}
}

// setActive marks c as carrying a request or idle; it reports false when c
// goes idle after a shutdown began, and it should close.
func (s *sinkServer) setActive(c net.Conn, active bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns[c] = active
	if active {
		// A shutdown may have cut the idle wait short as the request came.
		c.SetReadDeadline(time.Time{})
		return true
	}
	return !s.closed
}

// hint counts a hint as sinkHint does and returns the answer to write.
func (s *sinkServer) hint(req *http.Request, buf, out []byte, keep bool) ([]byte, bool) {
	body := io.LimitReader(req.Body, maxHintBytes+1)
	var n int64
	var err error
	for err == nil {
		var m int
		m, err = body.Read(buf)
		n += int64(m)
	}
	w := s.w
	if err != io.EOF || n > maxHintBytes {
		w.mu.Lock()
		w.rejected++
		w.mu.Unlock()
		msg := "http: request body too large"
		if err != io.EOF {
			msg = err.Error()
		}
		// The rest of the body is unread: close after answering.
		return appendAnswer(out, http.StatusBadRequest, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, []byte(msg+"\n"), false), false
	}
	w.mu.Lock()
	w.accepted++
	w.wakeLocked()
	status, delay := w.status, w.delay
	w.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if status == http.StatusNoContent && keep {
		return append(out, answer204...), true
	}
	return appendAnswer(out, status, nil, nil, keep), keep
}

// other serves any other request through the worker's Handler.
func (s *sinkServer) other(req *http.Request, out []byte, keep bool) ([]byte, bool) {
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	// What the handler left of the body is discarded so that the next
	// request can be read; a large remainder closes the connection.
	if n, _ := io.CopyN(io.Discard, req.Body, 1<<20); n == 1<<20 {
		keep = false
	}
	body := rec.Body.Bytes()
	if req.Method == http.MethodHead {
		body = nil
	}
	return appendAnswer(out, rec.Code, rec.Header(), body, keep), keep
}

// appendAnswer appends a whole HTTP/1.1 answer with a Content-Length
// (none for 1xx, 204 and 304, which carry no body).
func appendAnswer(out []byte, status int, h http.Header, body []byte, keep bool) []byte {
	out = fmt.Appendf(out, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	for k, vs := range h {
		if k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			out = append(out, k...)
			out = append(out, ": "...)
			out = append(out, strings.NewReplacer("\r", " ", "\n", " ").Replace(v)...)
			out = append(out, "\r\n"...)
		}
	}
	if !keep {
		out = append(out, "Connection: close\r\n"...)
	}
	if status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified {
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, int64(len(body)), 10)
		out = append(out, "\r\n"...)
	} else {
		body = nil
	}
	out = append(out, "\r\n"...)
	return append(out, body...)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
