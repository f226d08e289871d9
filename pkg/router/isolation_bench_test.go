package router

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// BenchmarkBookIsolated is BenchmarkBook's fetch+retain booking on a role
// that also lists a third-party policy (one that does not declare
// NeverBlocks) which returns at once: what isolation costs such a policy
// (its goroutine, its copy of the booking, the timer of its hard
// deadline), against the same role with the policy declaring NeverBlocks
// (run inline). The vendor action's payload check (CheckAction parses an
// unknown type's JSON) is most of the allocations of both.
func BenchmarkBookIsolated(b *testing.B) {
	for _, tc := range []struct {
		name        string
		neverBlocks bool
	}{{"inline", true}, {"isolated", false}} {
		b.Run(tc.name, func(b *testing.B) {
			cat := builtin.NewCatalog()
			action := []hints.Action{{Type: "vendor.mark", Version: "1.0", Payload: hints.RawPayload([]byte(`{"ok":true}`))}}
			if err := cat.RegisterHint(hints.HintProvider{Type: "third-party", NeverBlocks: tc.neverBlocks, Parse: func(hints.Params) (hints.HintPolicy, error) {
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return action, nil }), nil
			}}); err != nil {
				b.Fatal(err)
			}
			w := newChanWorker(1024)
			b.Cleanup(w.close)
			// Deadlines of a second: on a loaded machine the policy must
			// not be ejected mid-run, which would measure its skips.
			d := NewDispatcher(Options{Catalog: cat, Workers: workerMap{"decode-worker-0": w}, PolicyDeadline: time.Second,
				Isolation: IsolationOptions{HardDeadline: time.Second}, Log: logr.Discard()})
			if err := d.Load([]byte(benchConfig+"      - type: third-party\n"), "bench"); err != nil {
				b.Fatal(err)
			}
			bk := benchBooking(false)
			ctx := context.Background()
			if h, err := d.Book(ctx, bk); err != nil || h.Actions != 3 {
				b.Fatalf("Book: %v, %d actions, want 3", err, h.Actions)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Book(ctx, bk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
