package dispatch

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
// (run inline), the same role with the policy ejected, and the role
// without it: an ejected policy should cost its role nothing but a load
// and a counter. The vendor action's payload check (CheckAction parses an
// unknown type's JSON) is most of the allocations of inline and isolated.
func BenchmarkBookIsolated(b *testing.B) {
	for _, tc := range []struct {
		name        string
		listed      bool // the role lists the third-party policy
		neverBlocks bool
		ejected     bool
	}{
		{"absent", false, false, false},
		{"inline", true, true, false},
		{"isolated", true, false, false},
		{"ejected", true, false, true},
	} {
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
				Isolation: IsolationOptions{HardDeadline: time.Second, EjectionBase: time.Hour}, Log: logr.Discard()})
			doc, want := benchConfig, 2
			if tc.listed {
				doc, want = doc+"      - type: third-party\n", 3
			}
			if err := d.Load([]byte(doc), "bench"); err != nil {
				b.Fatal(err)
			}
			if tc.ejected {
				for _, o := range d.iso.outliers {
					d.iso.eject(o, EjectOverrun, "benchmark")
				}
				want = 2
			}
			bk := benchBooking(false)
			ctx := context.Background()
			if h, err := d.Book(ctx, bk); err != nil || h.Actions != want {
				b.Fatalf("Book: %v, %d actions, want %d", err, h.Actions, want)
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
