package delivery

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
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
	churn(t, del, w, n, func(int) string { return ep })
	testenv.Eventually(t, 5*time.Second, "the removed workers' goroutines gone", func(context.Context) error {
		if extra := runtime.NumGoroutine() - base; extra > 10 {
			return fmt.Errorf("%d workers added and removed left %d goroutines, want at most 10", n, extra)
		}
		return nil
	})
}

// TestWorkerChurnOverEndpointsBounded: 200 workers added, sent a hint and
// removed one after another, each at an endpoint of its own, so no client
// can be shared. With 4 clients parked and 4 dropped at most (lowered from
// 1,024 each), the goroutines left stay within those bounds, not one per
// worker: past them a new endpoint's client posts with "Connection:
// close" and has no cleaner goroutine. Every hint is still delivered.
func TestWorkerChurnOverEndpointsBounded(t *testing.T) {
	anyPath := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.URL.Path = simworker.HintPath
			h.ServeHTTP(w, r)
		})
	}
	w, ep, conns := closingWorker(t, anyPath, 0)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, Log: testLogger(t)})
	del.maxParked, del.maxRetired = 4, 4
	t.Cleanup(func() { del.Close(context.Background()) })
	base := runtime.NumGoroutine()
	const n = 200
	churn(t, del, w, n, func(i int) string { return fmt.Sprintf("%s/%d", ep, i) })
	testenv.Eventually(t, 5*time.Second, "the removed workers' goroutines gone", func(context.Context) error {
		if extra := runtime.NumGoroutine() - base; extra > 4+4+10 {
			return fmt.Errorf("%d workers at endpoints of their own added and removed left %d goroutines, want at most 18", n, extra)
		}
		return nil
	})
	if got := conns.Load(); got != n {
		t.Errorf("%d connections for %d workers at %d endpoints, want one each", got, n, n)
	}
}

// churn adds n workers one after another, worker i at endpoint(i), sends
// each a hint, waits until w has it and removes the worker.
func churn(t *testing.T, del *Delivery, w *simworker.Worker, n int, endpoint func(i int) string) {
	t.Helper()
	for i := range n {
		q := del.NewQueue(fmt.Sprintf("w%d", i), endpoint(i))
		q.Enqueue([]byte(message(fmt.Sprint(i), staticJSON(1, "x"))), time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := w.WaitForHints(ctx, i+1)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		q.Close()
	}
}
