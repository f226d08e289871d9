package dispatch

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// isolationConfig lists a custom policy after kv-fetch, as the issue's
// slow policy was.
const isolationConfig = `
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: kv-fetch
      - type: test-custom
`

// customPolicy is a third-party policy (it does not declare NeverBlocks)
// whose behaviour the test changes as it goes: it sleeps for delay, or
// blocks until release is closed while hang is set.
type customPolicy struct {
	delay   atomic.Int64
	hang    atomic.Bool
	release chan struct{}
	runs    atomic.Int32
}

func registerCustom(t *testing.T, cat *hints.Catalog, neverBlocks bool) *customPolicy {
	t.Helper()
	p := &customPolicy{release: make(chan struct{})}
	t.Cleanup(func() { close(p.release) })
	err := cat.RegisterHint(hints.HintProvider{Type: "test-custom", NeverBlocks: neverBlocks, Parse: func(hints.Params) (hints.HintPolicy, error) {
		return hints.HintPolicyFunc(func(ctx context.Context, hc *hints.HintContext) ([]hints.Action, error) {
			p.runs.Add(1)
			if p.hang.Load() {
				<-p.release
			}
			if d := time.Duration(p.delay.Load()); d > 0 {
				if neverBlocks {
					for start := time.Now(); time.Since(start) < d; { // computes, never blocks
					}
				} else {
					time.Sleep(d)
				}
			}
			return []hints.Action{{Type: "vendor.mark", Version: "1.0", Payload: hints.RawPayload([]byte(`{"request":"` + hc.RequestID + `"}`))}}, nil
		}), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func isolationDispatcher(t *testing.T, cat *hints.Catalog, o Options) (*Dispatcher, *recordedMetrics) {
	t.Helper()
	m := newRecordedMetrics()
	o.Catalog, o.Metrics, o.Log = cat, m, logr.Discard()
	o.Workers = StaticWorkers{"w1": true}
	d := NewDispatcher(o)
	if err := d.Load([]byte(isolationConfig), "test"); err != nil {
		t.Fatal(err)
	}
	return d, m
}

func isoBooking(id string) *Booking {
	return &Booking{RequestID: id, Role: "decode", Worker: "w1",
		KVCopy: &hints.CommittedCopy{SourceWorker: "w2", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22}}}
}

// actionTypes lists the action types of a built message.
func actionTypes(t *testing.T, d *Dispatcher, id string) []string {
	t.Helper()
	h, err := d.Build(context.Background(), isoBooking(id))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, part := range strings.Split(string(h.Message), `"action_type":"`)[1:] {
		types = append(types, part[:strings.IndexByte(part, '"')])
	}
	return types
}

// overruns reads a policy's overrun count and seconds.
func overruns(m *recordedMetrics, role, policy string) (float64, float64) {
	return m.value("overruns", role, policy, policy), m.value("overrun_seconds", role, policy, policy)
}

// waitState waits, bounded, for the policy's outlier to reach a state.
func waitState(t *testing.T, d *Dispatcher, want PolicyState) {
	t.Helper()
	o := d.iso.outliers[outlierKey("decode", "test-custom", "test-custom")]
	for end := time.Now().Add(10 * time.Second); PolicyState(o.state.Load()) != want; {
		if time.Now().After(end) {
			t.Fatalf("policy is %v after 10s, want %v", PolicyState(o.state.Load()), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlowPolicyEjected: a policy that overruns its deadline keeps its
// actions (the time is spent) and is counted; after EjectAfter overruns in
// a row it is ejected, bookings skip it, and it comes back on probation,
// where one overrun ejects it for a longer backoff and ProbationRuns runs
// on time make it healthy. Before isolation every run of it was dropped,
// and bookings waited for every one.
func TestSlowPolicyEjected(t *testing.T) {
	cat := builtin.NewCatalog()
	p := registerCustom(t, cat, false)
	// A deadline of 20 ms and runs of 40 ms: a loaded machine can take a
	// few milliseconds to schedule a run that returns at once, which must
	// still count as on time.
	p.delay.Store(int64(40 * time.Millisecond))
	iso := IsolationOptions{HardDeadline: time.Second, EjectAfter: 3, EjectionBase: 50 * time.Millisecond, EjectionMultiplier: 4,
		EjectionMax: time.Second, ProbationRuns: 2}
	d, m := isolationDispatcher(t, cat, Options{PolicyDeadline: 20 * time.Millisecond, Isolation: iso})
	var changes atomic.Int32
	d.OnEjectionChange(func() { changes.Add(1) })
	series := func(name string, reason ...string) float64 {
		return m.value(append([]string{name, "decode", "test-custom", "test-custom"}, reason...)...)
	}

	for i := range 3 {
		if got := actionTypes(t, d, "late"); len(got) != 2 || got[1] != "vendor.mark" {
			t.Fatalf("overrun %d: actions %v, want kv.fetch and the late policy's vendor.mark kept", i+1, got)
		}
	}
	if n, secs := overruns(m, "decode", "test-custom"); n != 3 || secs < 3*0.040 {
		t.Errorf("overruns counted %v taking %vs, want 3 taking at least 120ms", n, secs)
	}
	if n := m.value("failures", "decode", "test-custom", "test-custom", "deadline"); n != 0 {
		t.Errorf("deadline failures %v, want 0: a late return keeps its actions", n)
	}
	ej := d.Ejections()
	if len(ej) != 1 || ej[0].Policy != "test-custom" || ej[0].Role != "decode" || ej[0].Reason != EjectOverrun || ej[0].InARow != 1 {
		t.Fatalf("Ejections() = %+v, want test-custom of decode, for overrun, first in a row", ej)
	}
	if got := ej[0].Until.Sub(ej[0].Since); got != 50*time.Millisecond {
		t.Errorf("first backoff %v, want the base 50ms", got)
	}
	if series("ejected") != 1 || series("ejections", "overrun") != 1 {
		t.Errorf("ejected gauge %v, ejections %v; want 1, 1", series("ejected"), series("ejections", "overrun"))
	}
	runs := p.runs.Load()
	if got := actionTypes(t, d, "skipped"); len(got) != 1 || got[0] != "kv.fetch" {
		t.Errorf("while ejected: actions %v, want kv.fetch alone", got)
	}
	if p.runs.Load() != runs {
		t.Error("an ejected policy ran")
	}
	if series("skipped", "ejected") != 1 {
		t.Errorf("skipped (ejected) %v, want 1", series("skipped", "ejected"))
	}

	// Probation: one overrun ejects again, for base times the multiplier.
	waitState(t, d, PolicyProbation)
	if len(d.Ejections()) != 0 || series("probation") != 1 {
		t.Fatalf("on probation: Ejections() = %+v, probation gauge %v", d.Ejections(), series("probation"))
	}
	actionTypes(t, d, "probation-late")
	ej = d.Ejections()
	if len(ej) != 1 || ej[0].InARow != 2 || ej[0].Until.Sub(ej[0].Since) != 200*time.Millisecond {
		t.Fatalf("after an overrun on probation: %+v, want the second ejection in a row, for 200ms", ej)
	}

	// Probation passed: the policy is healthy, the backoff starts over.
	waitState(t, d, PolicyProbation)
	p.delay.Store(0)
	for range 2 {
		if got := actionTypes(t, d, "on-time"); len(got) != 2 {
			t.Fatalf("on probation, on time: actions %v, want both", got)
		}
	}
	waitState(t, d, PolicyActive)
	p.delay.Store(int64(40 * time.Millisecond))
	for range 3 {
		actionTypes(t, d, "late-again")
	}
	if ej = d.Ejections(); len(ej) != 1 || ej[0].InARow != 1 {
		t.Errorf("after a passed probation: %+v, want a first ejection again", ej)
	}
	// Ejected, re-admitted, ejected, re-admitted, ejected: each once.
	if n := changes.Load(); n != 5 {
		t.Errorf("transitions reported %d times, want 5", n)
	}
}

// TestHangingPolicyBounded: a policy that never returns does not hold the
// booking: it answers with the other policies' actions while the policy is
// still blocked, the run is counted as abandoned and the policy ejected at
// once. The goroutines such a policy holds are bounded by MaxRuns.
func TestHangingPolicyBounded(t *testing.T) {
	cat := builtin.NewCatalog()
	p := registerCustom(t, cat, false)
	p.hang.Store(true)
	d, m := isolationDispatcher(t, cat, Options{Isolation: IsolationOptions{HardDeadline: 5 * time.Millisecond,
		EjectionBase: time.Millisecond, EjectionMax: time.Millisecond, MaxRuns: 4}})
	series := func(name string, reason ...string) float64 {
		return m.value(append([]string{name, "decode", "test-custom", "test-custom"}, reason...)...)
	}

	if got := actionTypes(t, d, "hang"); len(got) != 1 || got[0] != "kv.fetch" {
		t.Fatalf("actions %v, want kv.fetch alone while the policy hangs", got)
	}
	select {
	case <-p.release:
		t.Fatal("the policy was released: the booking cannot have waited for it")
	default:
	}
	if n := m.value("failures", "decode", "test-custom", "test-custom", "deadline"); n != 1 {
		t.Errorf("abandoned runs %v, want 1", n)
	}
	if ej := d.Ejections(); len(ej) != 1 || ej[0].Reason != EjectAbandoned {
		t.Errorf("Ejections() = %+v, want test-custom for abandoned", ej)
	}

	// Many bookings, re-admitted every millisecond: never more than
	// MaxRuns runs of the policy in flight.
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				_ = i
				h, err := d.Build(context.Background(), isoBooking("many"))
				if err != nil || h.Actions < 1 {
					t.Errorf("worker %d: %v, %d actions", w, err, h.Actions)
					return
				}
			}
		}()
	}
	wg.Wait()
	o := d.iso.outliers[outlierKey("decode", "test-custom", "test-custom")]
	if n := o.inFlight.Load(); n > 4 {
		t.Errorf("%d runs in flight, over MaxRuns 4", n)
	}
	if n := series("abandoned_runs"); n < 1 || n > 4 {
		t.Errorf("abandoned runs held %v, want 1 to 4", n)
	}
	if g := runtime.NumGoroutine() - before; g > 4 {
		t.Errorf("%d more goroutines after the bookings, over MaxRuns 4", g)
	}
	if series("skipped", "ejected")+series("skipped", "busy") == 0 {
		t.Error("no booking skipped the hanging policy")
	}
}

// TestNeverBlocksKeepsLateActions: a policy that declares NeverBlocks (as
// the built-ins do) keeps its actions however late its run, with a CPU
// hog on every core: no deadline drop, no ejection, the overrun counted.
// Before, such a run was dropped for the deadline unless the preemption
// excuse fired, which a thread waiting for its P did not trigger.
func TestNeverBlocksKeepsLateActions(t *testing.T) {
	cat := builtin.NewCatalog()
	p := registerCustom(t, cat, true)
	p.delay.Store(int64(200 * time.Microsecond))
	// A deadline of 1ns: every run is late, kv-fetch's too.
	d, m := isolationDispatcher(t, cat, Options{PolicyDeadline: time.Nanosecond, PolicyDeadlinePerBlock: -1})
	var stop atomic.Bool
	var hogs sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		hogs.Add(1)
		go func() {
			defer hogs.Done()
			for !stop.Load() { // a busy loop on every core
			}
		}()
	}
	for range 200 {
		if got := actionTypes(t, d, "hog"); len(got) != 2 {
			t.Fatalf("actions %v, want kv.fetch and vendor.mark", got)
		}
	}
	stop.Store(true)
	hogs.Wait()
	for _, policy := range []string{"kv-fetch", "test-custom"} {
		if n := m.value("failures", "decode", policy, policy, "deadline"); n != 0 {
			t.Errorf("%s: %v deadline drops, want 0", policy, n)
		}
		if n, _ := overruns(m, "decode", policy); n != 200 {
			t.Errorf("%s: %v overruns counted, want 200", policy, n)
		}
	}
	if len(d.Ejections()) != 0 || len(d.iso.outliers) != 0 {
		t.Errorf("a policy that never blocks has ejection state: %+v", d.Ejections())
	}
}

// TestIsolationOptions: the values out of range are refused naming their
// flag, and the backoff grows by the multiplier up to its cap.
func TestIsolationOptions(t *testing.T) {
	for _, tc := range []struct {
		o    IsolationOptions
		want string // in the error; "" for none
	}{
		{IsolationOptions{}, ""},
		{IsolationOptions{HardDeadline: -time.Millisecond}, "--policy-hard-deadline"},
		{IsolationOptions{EjectAfter: -1}, "--policy-eject-after"},
		{IsolationOptions{EjectionBase: -time.Second}, "--policy-ejection-base"},
		{IsolationOptions{EjectionMultiplier: 0.5}, "--policy-ejection-multiplier"},
		{IsolationOptions{EjectionBase: time.Minute, EjectionMax: time.Second}, "--policy-ejection-max"},
		{IsolationOptions{ProbationRuns: -1}, "--policy-probation-runs"},
		{IsolationOptions{MaxRuns: -1}, "--policy-max-runs"},
	} {
		err := tc.o.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.o, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
	o := IsolationOptions{EjectionBase: time.Second, EjectionMultiplier: 3, EjectionMax: 20 * time.Second}.withDefaults()
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, o.backoff(n))
	}
	want := []time.Duration{time.Second, 3 * time.Second, 9 * time.Second, 20 * time.Second, 20 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("backoffs %v, want %v", got, want)
	}
}
