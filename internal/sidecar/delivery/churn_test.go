package delivery

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestWorkerChurnReleasesClients: 300 workers added, sent a hint and
// removed one after another, each with its own ID and the same endpoint
// (a worker restarted under a new ID), leave no client goroutine each
// behind: the client of a removed worker is parked and taken by the next
// queue for the endpoint. fasthttp's client keeps a cleaner goroutine
// asleep for the idle timeout (90 s) after its last connection, so
// without the reuse this left 300 goroutines.
func TestWorkerChurnReleasesClients(t *testing.T) {
	w, ep, _ := closingWorker(t, nil, 0)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	base := runtime.NumGoroutine()
	const n = 300
	for i := range n {
		q := del.NewQueue(fmt.Sprintf("w%d", i), ep)
		q.Enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := w.WaitForHints(ctx, i+1); err != nil {
			t.Fatal(err)
		}
		cancel()
		q.Close()
	}
	eventually(t, 5*time.Second, func() error {
		if extra := runtime.NumGoroutine() - base; extra > 10 {
			return fmt.Errorf("%d workers added and removed left %d goroutines, want at most 10", n, extra)
		}
		return nil
	})
}
