package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestDeliveryKeepAlive: many hints to one worker share one connection.
func TestDeliveryKeepAlive(t *testing.T) {
	w, ep, conns := closingWorker(t, nil, 0)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", ep)
	const n = 50
	// One at a time, so that the sender always finds an idle connection.
	sendOneByOne(t, w, q, n, 0)
	waitSent(t, m, n)
	if c := conns.Load(); c != 1 {
		t.Errorf("%d hints opened %d connections, want 1 kept alive", n, c)
	}
}

// TestDeliveryFailures: stale hints are dropped unsent, refused and timed
// out posts are counted, and nothing is retried.
func TestDeliveryFailures(t *testing.T) {
	w := startWorker(t, "w")
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Timeout: 100 * time.Millisecond, HintTTL: time.Second, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	q := del.NewQueue("w", w.HintEndpoint())
	msg := []byte(message("m", staticJSON(1, "x")))

	q.Enqueue(msg, time.Now().Add(-2*time.Second))
	testenv.Eventually(t, 5*time.Second, "one stale drop", func(context.Context) error {
		if v := testutil.ToFloat64(m.drops[dropReasonStale]); v != 1 {
			return fmt.Errorf("stale drops %v, want 1", v)
		}
		return nil
	})

	w.SetBehaviour(http.StatusServiceUnavailable, 0)
	q.Enqueue(msg, time.Now())
	testenv.Eventually(t, 5*time.Second, "one status error", func(context.Context) error {
		if v := testutil.ToFloat64(m.errStatus); v != 1 {
			return fmt.Errorf("status errors %v, want 1", v)
		}
		return nil
	})

	w.SetBehaviour(http.StatusNoContent, time.Second)
	q.Enqueue(msg, time.Now())
	testenv.Eventually(t, 5*time.Second, "one timeout", func(context.Context) error {
		if v := testutil.ToFloat64(m.errTimeout); v != 1 {
			return fmt.Errorf("timeouts %v, want 1", v)
		}
		return nil
	})
	// Each hint was posted once: the stale one never, the others once each.
	if got := len(w.Hints()); got != 2 {
		t.Errorf("the worker saw %d posts, want 2 (no retries)", got)
	}
	if v := testutil.ToFloat64(m.hintsSent); v != 0 {
		t.Errorf("hints_sent_total %v, want 0", v)
	}
}

// TestDeliveryDrain: Close posts what is queued, and past its deadline
// counts the rest as dropped instead of waiting on a stuck worker.
func TestDeliveryDrain(t *testing.T) {
	t.Run("drains the queue", func(t *testing.T) {
		w := startWorker(t, "w")
		m := NewMetrics(prometheus.NewRegistry())
		del := New(Options{Metrics: m, QueueSize: 16, Log: testLogger(t)})
		gate := make(chan struct{})
		send := del.send
		del.send = func(q *Queue, it queued) { <-gate; send(q, it) }
		q := del.NewQueue("w", w.HintEndpoint())
		for i := range 5 {
			q.Enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
		}
		close(gate)
		if err := del.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := len(w.Hints()); got != 5 {
			t.Errorf("after the drain the worker has %d hints, want 5", got)
		}
		if q.Enqueue([]byte("{}"), time.Now()) {
			t.Error("a closed delivery took a hint")
		}
	})
	t.Run("gives up at the deadline", func(t *testing.T) {
		w := startWorker(t, "w")
		w.SetBehaviour(http.StatusNoContent, 10*time.Second)
		m := NewMetrics(prometheus.NewRegistry())
		del := New(Options{Metrics: m, QueueSize: 16, Timeout: 10 * time.Second, Log: testLogger(t)})
		q := del.NewQueue("w", w.HintEndpoint())
		for i := range 5 {
			q.Enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := del.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v past a 200ms deadline", d)
		}
		if v := testutil.ToFloat64(m.drops[dropReasonShutdown]); v != 5 {
			t.Errorf("shutdown drops %v, want 5: the one in flight is cut short, the rest never sent", v)
		}
	})
}
