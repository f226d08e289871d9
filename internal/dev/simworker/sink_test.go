package simworker

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func startSinkServer(t *testing.T) *Server {
	t.Helper()
	s, err := Start(New(Options{ID: "w", Sink: true}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if s.sink == nil {
		t.Fatal("a sink worker should be served by the sink server")
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawExchange writes raw requests on one connection and reads the answers
// with net/http, checking that each is well-formed HTTP/1.1.
func rawExchange(t *testing.T, s *Server, raw string, n int) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", len(out)+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		out = append(out, resp)
	}
	return out
}

func TestSinkServerHTTP(t *testing.T) {
	s := startSinkServer(t)
	hint := `{"protocol_version":"0.1"}`
	raw := "POST /v1/hints HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(hint)) + "\r\n\r\n" + hint +
		// chunked body, with the 100-continue handshake
		"POST /v1/hints HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n" +
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" +
		"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n" +
		"GET /hints HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	resps := rawExchange(t, s, raw, 6)
	want := []int{204, 100, 204, 200, 404, 200}
	for i, r := range resps {
		if r.StatusCode != want[i] {
			t.Errorf("answer %d: %s, want %d", i+1, r.Status, want[i])
		}
	}
	if b, _ := io.ReadAll(resps[3].Body); string(b) != "ok: worker w\n" {
		t.Errorf("healthz: %q", b)
	}
	if !resps[5].Close {
		t.Error("an answer to Connection: close should close")
	}
	var got struct {
		Accepted int  `json:"accepted"`
		Sink     bool `json:"sink"`
	}
	if err := json.NewDecoder(resps[5].Body).Decode(&got); err != nil || got.Accepted != 2 || !got.Sink {
		t.Errorf("GET /hints: %+v %v", got, err)
	}
}

func TestSinkServerRefuses(t *testing.T) {
	s := startSinkServer(t)
	resps := rawExchange(t, s, "NONSENSE\r\n\r\n", 1)
	if resps[0].StatusCode != 400 || !resps[0].Close {
		t.Errorf("malformed request: %s close %v", resps[0].Status, resps[0].Close)
	}
	s.SetBehaviour(http.StatusServiceUnavailable, 0)
	resps = rawExchange(t, s, "POST /v1/hints HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 1)
	if resps[0].StatusCode != 503 {
		t.Errorf("with status 503 set: %s", resps[0].Status)
	}
}

// TestSinkServerKeepAlive: a net/http client's posts share one connection,
// and Shutdown ends the server.
func TestSinkServerKeepAlive(t *testing.T) {
	s := startSinkServer(t)
	var conns int
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conns++
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for range 20 {
		resp, err := c.Post(s.HintEndpoint(), "application/json", strings.NewReader(`{"x":1}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 204 {
			t.Fatalf("status %s", resp.Status)
		}
	}
	if conns != 1 || s.Accepted() != 20 {
		t.Errorf("%d connections, %d accepted; want 1 and 20", conns, s.Accepted())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL, "http://"), time.Second); err == nil {
		t.Error("still accepting after Shutdown")
	}
}

// TestSinkServerShutdownWaitsForRequest: Shutdown lets a hint whose body is
// still arriving finish, as net/http's Server.Shutdown does (it closes
// only idle connections); it is accepted, not rejected.
func TestSinkServerShutdownWaitsForRequest(t *testing.T) {
	for _, sink := range []bool{false, true} {
		t.Run("sink="+strconv.FormatBool(sink), func(t *testing.T) {
			w := New(Options{ID: "w", Sink: sink})
			s, err := Start(w, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			body := msg(action(1, "kv.fetch", `{"block_hashes":[1]}`))
			io.WriteString(c, "POST "+HintPath+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body[:5])
			time.Sleep(100 * time.Millisecond) // the head is read, the body is not all in
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				done <- s.Shutdown(ctx)
			}()
			time.Sleep(100 * time.Millisecond)
			io.WriteString(c, body[5:])
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a hint in progress at Shutdown: %v", err)
			}
			msg, _ := io.ReadAll(resp.Body)
			if resp.StatusCode/100 != 2 || w.Accepted() != 1 || w.Rejected() != 0 {
				t.Errorf("status %d (%q), accepted %d, rejected %d; want 2xx, 1, 0", resp.StatusCode, msg, w.Accepted(), w.Rejected())
			}
			if err := <-done; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}
