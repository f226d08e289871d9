package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// outcomes counts a router's bookings by role and outcome, and nothing
// else: every other series it hands out is nil, which counts nothing. A
// router that exports Prometheus series returns its vectors' children
// instead (vec.WithLabelValues(role, outcome.String())).
type outcomes struct {
	mu     sync.Mutex
	counts map[string]*count
}

// count is a Counter; atomic, as every booking goroutine adds to it.
type count struct{ n atomic.Int64 }

func (c *count) Inc()          { c.n.Add(1) }
func (c *count) Add(v float64) { c.n.Add(int64(v)) }

func (o *outcomes) Role(role string) dispatch.RoleMetrics { return outcomesOf{o, role} }

func (*outcomes) Refusals(dispatch.Refusal) dispatch.Counter                 { return nil }
func (*outcomes) Policy(string, string, string) dispatch.PolicyMetrics       { return nil }
func (*outcomes) Isolation(string, string, string) dispatch.IsolationMetrics { return nil }
func (*outcomes) ConfigLoaded(string, string, time.Time)                     {}
func (*outcomes) ConfigFailed(time.Time)                                     {}
func (*outcomes) ForgetRole(string)                                          {}
func (*outcomes) ForgetPolicy(string, string, string)                        {}

type outcomesOf struct {
	o    *outcomes
	role string
}

// Bookings is called when a config loads, once per role and outcome.
func (r outcomesOf) Bookings(outcome dispatch.Outcome) dispatch.Counter {
	r.o.mu.Lock()
	defer r.o.mu.Unlock()
	key := r.role + " " + outcome.String()
	if r.o.counts[key] == nil {
		r.o.counts[key] = &count{}
	}
	return r.o.counts[key]
}

func (outcomesOf) BuildSeconds() dispatch.Observer                  { return nil }
func (outcomesOf) CopiesDropped(dispatch.CopyDrop) dispatch.Counter { return nil }

// A router that links the dispatcher fills Options.Metrics with what it
// wants counted; nil counts nothing.
func ExampleMetrics() {
	m := &outcomes{counts: map[string]*count{}}
	d := dispatch.NewDispatcher(dispatch.Options{
		Catalog: builtin.NewCatalog(),
		Workers: dispatch.StaticWorkers{"decode-0": true, "decode-1": false},
		Metrics: m,
	})
	if err := d.Load([]byte("worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}]}\n"), "hints.yaml"); err != nil {
		panic(err)
	}
	for _, w := range []string{"decode-0", "decode-1", "decode-0"} {
		d.Build(context.Background(), &dispatch.Booking{RequestID: "r", Role: "decode", Worker: w})
	}
	fmt.Println(m.counts["decode no_actions"].n.Load(), m.counts["decode not_hint_capable"].n.Load())
	// Output:
	// 2 1
}
