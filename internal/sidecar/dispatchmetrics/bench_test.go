package dispatchmetrics

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// BenchmarkBuildMetrics is pkg/dispatch's BenchmarkBuild (a decode role
// running kv-fetch on 64 block hashes and kv-evict, or kv-retain alone
// without a copy) with the dispatcher's metrics as the sidecar registers
// them and with none (Options.Metrics nil): what the hook costs a booking.
func BenchmarkBuildMetrics(b *testing.B) {
	const config = `
worker_selection:
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv-fetch
      - type: kv-retain
        parameters: {ttl_seconds: 600}
      - type: kv-evict
`
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	booking := func(copied bool) *dispatch.Booking {
		bk := &dispatch.Booking{RequestID: "req-7f3a9c2e-5b1d-4e8a-9c6f-0d2b3a4e5f60", Role: "decode", Worker: "decode-worker-0",
			PromptTokens: 4096, BlockSize: 64, Session: hints.Session{ID: "sess-42", Turn: 3, Final: copied}}
		if copied {
			bk.KVCopy = &hints.CommittedCopy{SourceWorker: "decode-worker-1", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: hashes}
		}
		return bk
	}
	for _, metrics := range []struct {
		name string
		m    func() dispatch.Metrics
	}{
		{"none", func() dispatch.Metrics { return nil }},
		{"prometheus", func() dispatch.Metrics { return New(prometheus.NewRegistry()) }},
	} {
		for _, tc := range []struct {
			name    string
			copied  bool
			actions int
		}{{"fetch+evict", true, 2}, {"no-copy", false, 1}} {
			b.Run(metrics.name+"/"+tc.name, func(b *testing.B) {
				d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: dispatch.StaticWorkers{"decode-worker-0": true},
					Metrics: metrics.m()})
				if err := d.Load([]byte(config), "bench"); err != nil {
					b.Fatal(err)
				}
				bk := booking(tc.copied)
				ctx := context.Background()
				if h, err := d.Build(ctx, bk); err != nil || h.Actions != tc.actions {
					b.Fatalf("Build: %v, %d actions, want %d", err, h.Actions, tc.actions)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.Build(ctx, bk); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
