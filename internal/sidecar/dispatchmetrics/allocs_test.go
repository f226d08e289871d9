//go:build !race

// The race detector's sync.Pool drops the dispatcher's pooled scratch at
// random, so allocations are counted without it.

package dispatchmetrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// TestBookingAllocatesNothing: with the Prometheus series, as the sidecar
// runs, a booking into the caller's memory allocates nothing and is
// counted: the series were resolved when the config loaded.
func TestBookingAllocatesNothing(t *testing.T) {
	m := New(prometheus.NewRegistry())
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: dispatch.StaticWorkers{"w1": true}, Metrics: m})
	if err := d.Load([]byte("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}, {type: kv-evict}]\n"), "test"); err != nil {
		t.Fatal(err)
	}
	bk := &dispatch.Booking{RequestID: "r1", Role: "decode", Worker: "w1", Session: hints.Session{ID: "s", Turn: 2, Final: true},
		KVCopy: &hints.CommittedCopy{SourceWorker: "w2", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22}}}
	ctx := context.Background()
	h, err := d.Build(ctx, bk)
	if err != nil || h.Actions != 2 {
		t.Fatalf("Build: %v, %d actions, want 2", err, h.Actions)
	}
	mem := h.Message[:0]
	if n := testing.AllocsPerRun(200, func() { _, _ = d.BuildInto(ctx, bk, mem) }); n != 0 {
		t.Errorf("%.1f allocations per booking into reused memory with Prometheus series, want 0", n)
	}
	if n := testutil.ToFloat64(m.bookings.WithLabelValues("decode", "hinted")); n < 201 {
		t.Errorf("bookings_total{decode,hinted} = %v, want at least 201", n)
	}
}
