package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// rawPolicy registers a hint type that returns one action with a raw payload.
func rawPolicy(t *testing.T, cat *hints.Catalog, typ, actionType, payload string) {
	t.Helper()
	err := cat.RegisterHint(hints.HintProvider{Type: typ, Parse: func(hints.Params) (hints.HintPolicy, error) {
		return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) {
			return []hints.Action{{Type: actionType, Version: "1.0", Payload: hints.RawPayload([]byte(payload))}}, nil
		}), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEngineConsumerRules: a custom plugin's payload that an engine would
// refuse is dropped as malformed, alone. Before the rules, an empty fetch
// ahead of the built-in one made the connector refuse the whole hint.
func TestEngineConsumerRules(t *testing.T) {
	cat := builtin.NewCatalog()
	rawPolicy(t, cat, "empty-fetch", "kv.fetch", `{"block_hashes":[]}`)
	rawPolicy(t, cat, "string-fetch", "kv.fetch", `{"block_hashes":["1"]}`)
	rawPolicy(t, cat, "unsorted", "kv.retain", `{"ttl_seconds":1.0,"priority":2}`)
	rawPolicy(t, cat, "duplicate", "kv.retain", `{"priority":1,"priority":2}`)
	rawPolicy(t, cat, "good-pin", "vendor.kv-pin", `{"tier":"hbm"}`)
	rawPolicy(t, cat, "second-fetch", "kv.fetch", `{"block_hashes":[9]}`)
	metrics := newRecordedMetrics()
	d := NewDispatcher(Options{Catalog: cat, Workers: StaticWorkers{"w1": true}, Metrics: metrics, Log: logr.Discard()})
	if err := d.Load([]byte(`
worker_selection:
  decode:
    type: kvcr
    hints: [{type: empty-fetch}, {type: string-fetch}, {type: unsorted}, {type: duplicate},
            {type: kv-fetch}, {type: good-pin}, {type: second-fetch}]
`), "test"); err != nil {
		t.Fatal(err)
	}
	h, err := d.Build(context.Background(), &Booking{RequestID: "r1", Role: "decode", Worker: "w1",
		KVCopy: &hints.CommittedCopy{SourceWorker: "w2", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"protocol_version":"0.1","message_id":"r1","actions":[` +
		`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22],"source_control_endpoint":"tcp://10.0.0.7:23280"}},` +
		`{"action_id":"a2","action_type":"vendor.kv-pin","action_version":"1.0","payload":{"tier":"hbm"}}]}`
	if diff := cmp.Diff(want, string(h.Message)); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}
	if !json.Valid(h.Message) {
		t.Errorf("message is not JSON: %s", h.Message)
	}
	for _, policy := range []string{"empty-fetch", "string-fetch", "unsorted", "duplicate", "second-fetch"} {
		if n := metrics.value("failures", "decode", policy, policy, "malformed"); n != 1 {
			t.Errorf("%s: %v malformed failures, want 1", policy, n)
		}
	}
	for _, policy := range []string{"kv-fetch", "good-pin"} {
		if n := metrics.value("actions", "decode", policy, policy); n != 1 {
			t.Errorf("%s: %v actions kept, want 1", policy, n)
		}
	}
}

// TestFetchOnlyFromTheCopySender: a policy that does not declare KVCopy
// and sends a kv.fetch loses its actions as malformed, and the role's real
// copy goes out. Before, its fetch went first and the real copy was dropped
// as the hint's second kv.fetch.
func TestFetchOnlyFromTheCopySender(t *testing.T) {
	cat := builtin.NewCatalog()
	rawPolicy(t, cat, "undeclared-fetch", "kv.fetch", `{"block_hashes":[1,2,3],"source_control_endpoint":"tcp://10.9.9.9:1"}`)
	metrics := newRecordedMetrics()
	d := NewDispatcher(Options{Catalog: cat, Workers: StaticWorkers{"w1": true}, Metrics: metrics, Log: logr.Discard()})
	if err := d.Load([]byte(`
worker_selection:
  decode:
    type: kvcr
    hints: [{type: undeclared-fetch}, {type: kv-fetch}]
`), "test"); err != nil {
		t.Fatal(err)
	}
	h, err := d.Build(context.Background(), &Booking{RequestID: "r1", Role: "decode", Worker: "w1",
		KVCopy: &hints.CommittedCopy{SourceWorker: "w2", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"protocol_version":"0.1","message_id":"r1","actions":[` +
		`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22],"source_control_endpoint":"tcp://10.0.0.7:23280"}}]}`
	if diff := cmp.Diff(want, string(h.Message)); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}
	if n := metrics.value("failures", "decode", "undeclared-fetch", "undeclared-fetch", "malformed"); n != 1 {
		t.Errorf("undeclared-fetch: %v malformed failures, want 1", n)
	}
	if n := metrics.value("actions", "decode", "kv-fetch", "kv-fetch"); n != 1 {
		t.Errorf("kv-fetch: %v actions kept, want 1", n)
	}
}

// TestBookingRulesInProcess: in process, a booking is refused where the
// HTTP API refuses it, and a refused booking's Hint says nothing happened.
// Before, turn 0 of a session was accepted, an empty copy gave no_actions
// where the HTTP API answers 400, and the Hint of a refused booking read
// hinted (Outcome's zero value).
func TestBookingRulesInProcess(t *testing.T) {
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Workers: StaticWorkers{"w1": true}, Log: logr.Discard()})
	if err := d.Load([]byte("worker_selection:\n  decode: kvcr\n"), "test"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    Booking
		want string
	}{
		{"turn 0 in a session", Booking{RequestID: "r1", Role: "decode", Worker: "w1", Session: hints.Session{ID: "s", Turn: 0}}, "session.turn is 0; turns count from 1"},
		{"empty copy", Booking{RequestID: "r1", Role: "decode", Worker: "w1", KVCopy: &hints.CommittedCopy{SourceEndpoint: "tcp://x:1"}}, "committed_kv_copy.block_hashes is empty"},
		{"no worker", Booking{RequestID: "r1", Role: "decode"}, "worker is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := d.Book(context.Background(), &tc.b)
			if !errors.Is(err, ErrInvalidBooking) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Book: %v; want ErrInvalidBooking saying %q", err, tc.want)
			}
			if h.Outcome != OutcomeNone || h.Outcome.String() != "none" || h.Outcome == OutcomeHinted {
				t.Errorf("Outcome of a refused booking = %v; want none", h.Outcome)
			}
		})
	}
	var zero Hint
	if zero.Outcome != OutcomeNone {
		t.Errorf("the zero Hint's Outcome is %v; want none", zero.Outcome)
	}
	// A session's first turn is fine.
	if h, err := d.Book(context.Background(), &Booking{RequestID: "r2", Role: "decode", Worker: "w1", Session: hints.Session{ID: "s", Turn: 1}}); err != nil || h.Outcome == OutcomeNone {
		t.Errorf("Book of turn 1: %v, %v", h.Outcome, err)
	}
}

// TestBookAllocations: a booking with a committed copy allocates its
// message and nothing else: the context, the kv.fetch's payload and its
// action come from the pooled scratch.
func TestBookAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops pooled scratch at random")
	}
	w := newChanWorker(1024)
	defer w.close()
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Workers: workerMap{"decode-worker-0": w}, PolicyDeadline: time.Second, Log: logr.Discard()})
	if err := d.Load([]byte(benchConfig), "allocs"); err != nil {
		t.Fatal(err)
	}
	for _, final := range []bool{true, false} {
		bk := benchBooking(final)
		ctx := context.Background()
		if h, err := d.Book(ctx, bk); err != nil || h.Actions != 2 {
			t.Fatalf("Book: %v, %d actions, want 2", err, h.Actions)
		}
		if n := testing.AllocsPerRun(200, func() { _, _ = d.Book(ctx, bk) }); n > 1 {
			t.Errorf("final %v: %.1f allocations per booking, want 1 (the message)", final, n)
		}
	}
}

// TestBuildInto: the message BuildInto writes is Build's, byte for byte; it
// is written in the caller's memory when that fits and in a buffer of its
// own when not, leaving the caller's alone; and with the memory reused a
// booking allocates nothing.
func TestBuildInto(t *testing.T) {
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Workers: StaticWorkers{"decode-worker-0": true}, PolicyDeadline: time.Second, Log: logr.Discard()})
	if err := d.Load([]byte(benchConfig), "into"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bk := benchBooking(true)
	want, err := d.Build(ctx, bk)
	if err != nil || want.Actions != 2 {
		t.Fatalf("Build: %v, %d actions, want 2", err, want.Actions)
	}

	// Too small: a buffer of its own, and the caller's bytes untouched.
	small := []byte("untouched")
	h, err := d.BuildInto(ctx, bk, small[:0])
	if err != nil || !bytes.Equal(h.Message, want.Message) || h.Outcome != OutcomeHinted || h.Actions != 2 {
		t.Fatalf("BuildInto(small) = %q (%v, %d actions, %v), want %q", h.Message, h.Outcome, h.Actions, err, want.Message)
	}
	if string(small) != "untouched" {
		t.Errorf("BuildInto wrote %q into a buffer too small for the message", small)
	}

	// Large enough: in place, from the start of the caller's memory, even
	// when the caller hands it over with bytes in it.
	buf := append(make([]byte, 0, 2*len(want.Message)), "stale bytes"...)
	h, err = d.BuildInto(ctx, bk, buf)
	if err != nil || !bytes.Equal(h.Message, want.Message) {
		t.Fatalf("BuildInto(buf) = %q (%v), want %q", h.Message, err, want.Message)
	}
	if &h.Message[0] != &buf[:1][0] {
		t.Error("BuildInto did not write the message in the memory it was given")
	}

	// Another booking into the same memory: the new message, whole.
	other := benchBooking(true)
	other.RequestID = "another-request"
	wantOther, err := d.Build(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	h, err = d.BuildInto(ctx, other, h.Message[:0])
	if err != nil || !bytes.Equal(h.Message, wantOther.Message) {
		t.Fatalf("BuildInto(reused) = %q (%v), want %q", h.Message, err, wantOther.Message)
	}

	// No message: nil, and the memory is not written.
	none := benchBooking(true)
	none.Worker = "not-registered"
	copy(buf[:cap(buf)][:5], "keep!")
	if h, err := d.BuildInto(ctx, none, buf[:0]); err != nil || h.Message != nil || h.Outcome != OutcomeUnknownWorker {
		t.Errorf("BuildInto(unknown worker) = %q, %v, %v; want no message, %v", h.Message, h.Outcome, err, OutcomeUnknownWorker)
	}
	if got := string(buf[:cap(buf)][:5]); got != "keep!" {
		t.Errorf("BuildInto with no message wrote %q into the caller's memory", got)
	}

	if raceEnabled {
		return // the race detector's sync.Pool drops pooled scratch at random
	}
	mem := h.Message[:0]
	if n := testing.AllocsPerRun(200, func() { h, _ = d.BuildInto(ctx, bk, mem) }); n != 0 {
		t.Errorf("%.1f allocations per booking into reused memory, want 0", n)
	}
}
