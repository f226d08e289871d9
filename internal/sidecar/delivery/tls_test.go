package delivery

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// silentServer accepts TCP connections and never says a word: a worker
// that never completes a TLS handshake. It keeps each connection until
// the peer closes it, and counts those open.
type silentServer struct {
	ln       net.Listener
	mu       sync.Mutex
	open     int
	maxOpen  int
	accepted int
}

func startSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open++
			s.maxOpen = max(s.maxOpen, s.open)
			s.accepted++
			s.mu.Unlock()
			go func() {
				// Reads the ClientHello and waits for the peer's close.
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Close()
				s.mu.Lock()
				s.open--
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *silentServer) counts() (open, accepted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.accepted
}

func (s *silentServer) peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxOpen
}

func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestTLSHandshakeStall: a worker that accepts TCP and never completes TLS
// costs at most its connection cap, and nothing once posts stop: every
// post times out within its timeout, counted, and leaves no connection,
// file descriptor or goroutine behind. Before the fix each timed-out post
// left its dial running forever: one descriptor and two goroutines per
// post.
func TestTLSHandshakeStall(t *testing.T) {
	srv := startSilentServer(t)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Timeout: 100 * time.Millisecond, HintTTL: time.Minute, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	fds, goroutines := openFDs(t), runtime.NumGoroutine()

	q := del.NewQueue("w", "https://"+srv.ln.Addr().String()+"/v1/hints")
	const posts = 20
	for i := range posts {
		q.Enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
	}
	testenv.Eventually(t, 10*time.Second, "every stalled post timed out", func(context.Context) error {
		if v := testutil.ToFloat64(m.errTimeout); v != posts {
			return fmt.Errorf("timeouts %v, want %d", v, posts)
		}
		return nil
	})
	open, accepted := srv.counts()
	t.Logf("%d posts: %d connections accepted, at most %d open at once, %d still open", posts, accepted, srv.peak(), open)
	if p := srv.peak(); p > MaxConnsPerWorker {
		t.Errorf("%d connections open at once to one worker, over the cap of %d", p, MaxConnsPerWorker)
	}
	// Every stalled handshake is given up within the post timeout (and a
	// little), so nothing stays open afterwards.
	testenv.Eventually(t, 2*time.Second, "the stalled handshakes closed", func(context.Context) error {
		if open, _ := srv.counts(); open != 0 {
			return fmt.Errorf("%d stalled handshakes still open", open)
		}
		if n := openFDs(t) - fds; n > 2 {
			return fmt.Errorf("%d more file descriptors than before", n)
		}
		if n := runtime.NumGoroutine() - goroutines; n > 4 {
			return fmt.Errorf("%d more goroutines than before", n)
		}
		return nil
	})
}
