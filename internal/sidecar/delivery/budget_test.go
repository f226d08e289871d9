package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// TestDeliveryByteBudget is the report's memory attack, scaled down: 20
// workers that accept hints and never answer, each with a queue of 64,
// and hints of 64 KiB. Count-bounded queues alone hold 20 x 64 x 64 KiB =
// 80 MiB; with an 8 MiB budget across all queues the heap stays near it,
// and the hints over it are dropped and counted by reason and by worker.
// A worker that leaves takes its series with it. Before the fix the heap
// grew by 80 MiB and nothing was dropped.
func TestDeliveryByteBudget(t *testing.T) {
	const (
		nWorkers  = 20
		perWorker = 64
		hintBytes = 64 << 10
		budget    = 8 << 20
	)
	srv := startSilentServer(t)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, QueueSize: perWorker, Timeout: 30 * time.Second, HintTTL: time.Minute, MaxQueuedBytes: budget, Log: testLogger(t)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		del.Close(ctx)
	})
	reg := workers.NewRegistry(registryDelivery{del})
	for i := range nWorkers {
		if err := reg.Set(workers.SourceAPI, workers.WorkerSpec{ID: fmt.Sprint("w", i), Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: "http://" + srv.ln.Addr().String() + "/v1/hints"}); err != nil {
			t.Fatal(err)
		}
	}
	before := heapInUse()
	pad := strings.Repeat("x", hintBytes-64)
	queued := 0
	for i := range perWorker + 1 {
		for j := range nWorkers {
			msg := []byte(fmt.Sprintf(`{"message_id":"%d-%d","pad":"%s"}`, i, j, pad))
			if reg.Lookup(fmt.Sprint("w", j)).Deliver(msg, time.Now()) {
				queued++
			}
		}
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("%d hints of 64 KiB offered to %d stalled workers: %d queued, heap grew by %d MiB", nWorkers*(perWorker+1), nWorkers, queued, grown>>20)
	if grown > budget+8<<20 {
		t.Errorf("the queues hold %d MiB, over the %d MiB budget and some slack", grown>>20, budget>>20)
	}
	overBudget := counter(t, m, "hints_dropped", "memory_budget")
	if overBudget == 0 {
		t.Fatal("no hint was dropped for the memory budget")
	}
	perWorkerSum := 0.0
	for j := range nWorkers {
		perWorkerSum += gathered(t, m.reg, dispatchmetrics.Namespace+"_worker_hints_dropped_total", map[string]string{"worker": fmt.Sprint("w", j), "reason": "memory_budget"})
	}
	if perWorkerSum != overBudget {
		t.Errorf("per-worker memory_budget drops add up to %v, the total is %v", perWorkerSum, overBudget)
	}
	if v := gathered(t, m.reg, dispatchmetrics.Namespace+"_delivery_queued_bytes", nil); v > budget || v == 0 {
		t.Errorf("delivery_queued_bytes = %v, want within (0, %d]", v, budget)
	}

	// A worker that leaves takes its per-worker series, and its queued
	// bytes go back to the budget.
	if err := reg.Delete(workers.SourceAPI, "w0"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "w0's series removed", func(context.Context) error {
		if v := gathered(t, m.reg, dispatchmetrics.Namespace+"_worker_hints_dropped_total", map[string]string{"worker": "w0", "reason": "memory_budget"}); v != 0 {
			return fmt.Errorf("w0 still has a series: %v", v)
		}
		return nil
	})
}
