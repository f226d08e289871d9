package stage

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// The stable config fetches the committed copy and retains the session's
// blocks; the candidate drops kv-fetch.
const (
	stableDoc = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-fetch
      - type: kv-retain
        parameters: {ttl_seconds: 600}
`
	noFetchDoc = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-retain
        parameters: {ttl_seconds: 600}
`
	candHash = "00000000000000c1"
)

func newStage(t testing.TB, reg prometheus.Registerer) *Stage {
	t.Helper()
	opts := dispatch.Options{Catalog: builtin.NewCatalog(), Workers: dispatch.StaticWorkers{"w0": true}}
	stable := dispatch.NewDispatcher(opts)
	if err := stable.Load([]byte(stableDoc), "test"); err != nil {
		t.Fatal(err)
	}
	return New(stable, opts, reg)
}

// booking is a session's turn with a committed copy when withCopy.
func booking(id, session string, withCopy bool) *dispatch.Booking {
	b := &dispatch.Booking{RequestID: id, Role: "decode", Worker: "w0", PromptTokens: 512, BlockSize: 64}
	if session != "" {
		b.Session = hints.Session{ID: session, Turn: 1}
	}
	if withCopy {
		b.KVCopy = &hints.CommittedCopy{SourceEndpoint: "tcp://10.0.0.7:1", BlockHashes: []uint64{1, 2, 3}}
	}
	return b
}

// TestShadowCountsDroppedFetch: planted, a candidate without kv-fetch.
// Every booking with a committed copy (the stable hint has a kv.fetch)
// differs, by kv.fetch alone; those without one are the same. The stable
// config's hints are what the bookings answer.
func TestShadowCountsDroppedFetch(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newStage(t, reg)
	if err := s.Load(dispatch.Config{Doc: []byte(noFetchDoc)}, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageShadow}, "test"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 40
	withCopy := 0
	for i := range n {
		b := booking(fmt.Sprintf("r%d", i), fmt.Sprintf("s%d", i), i%4 != 0)
		if b.KVCopy != nil {
			withCopy++
		}
		h, err := s.Book(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if h.ConfigHash != s.stable.ConfigHash() {
			t.Fatalf("a shadow booking answered with config %s, want the stable %s", h.ConfigHash, s.stable.ConfigHash())
		}
		if got := strings.Contains(string(h.Message), `"kv.fetch"`); got != (b.KVCopy != nil) {
			t.Fatalf("booking %d: kv.fetch in the answer = %v, want %v (the stable config's hint): %s", i, got, b.KVCopy != nil, h.Message)
		}
	}
	got := s.Shadow()[candHash]
	if got == nil {
		t.Fatalf("no shadow counts for %s: %v", candHash, s.Shadow())
	}
	want := rolloutapi.ShadowCounts{Bookings: n, Differ: int64(withCopy), ByAction: map[string]int64{hints.ActionKVFetch: int64(withCopy)}, ByRole: map[string]int64{"decode": int64(withCopy)}}
	if fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("shadow counts %+v, want %+v", *got, want)
	}
	if v := testutil.ToFloat64(s.metrics.bookings.WithLabelValues("decode", resultDiffer)); v != float64(withCopy) {
		t.Errorf("kvhint_shadow_bookings_total{result=differ} = %v, want %d", v, withCopy)
	}
	if v := testutil.ToFloat64(s.metrics.bookings.WithLabelValues("decode", resultSame)); v != float64(n-withCopy) {
		t.Errorf("kvhint_shadow_bookings_total{result=same} = %v, want %d", v, n-withCopy)
	}
	if v := testutil.ToFloat64(s.metrics.actionDiffs.WithLabelValues("decode", hints.ActionKVFetch)); v != float64(withCopy) {
		t.Errorf("kvhint_shadow_action_diff_total{action=kv.fetch} = %v, want %d", v, withCopy)
	}
	if v := testutil.ToFloat64(s.metrics.actionDiffs.WithLabelValues("decode", hints.ActionKVRetain)); v != 0 {
		t.Errorf("kvhint_shadow_action_diff_total{action=kv.retain} = %v, want 0: retain is the same in both", v)
	}
}

// TestCanaryWeight: a canary of weight 10 books about 10% of sessions with
// the candidate, and every booking of a session with the same config.
func TestCanaryWeight(t *testing.T) {
	s := newStage(t, nil)
	if err := s.Load(dispatch.Config{Doc: []byte(noFetchDoc)}, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageCanary, Weight: 10}, "test"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const sessions, turns = 2000, 3
	onCandidate := 0
	for i := range sessions {
		var first string
		for turn := range turns {
			b := booking(fmt.Sprintf("r%d-%d", i, turn), fmt.Sprintf("session-%d", i), true)
			h, err := s.Book(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if turn == 0 {
				first = h.ConfigHash
			} else if h.ConfigHash != first {
				t.Fatalf("session %d: turn %d booked with %s, turn 1 with %s", i, turn+1, h.ConfigHash, first)
			}
			// The config that booked it is the one whose hint it carries.
			if fetch := strings.Contains(string(h.Message), `"kv.fetch"`); fetch != (h.ConfigHash != candHash) {
				t.Fatalf("session %d: config %s answered a hint with kv.fetch=%v", i, h.ConfigHash, fetch)
			}
		}
		if first == candHash {
			onCandidate++
		}
	}
	// Binomial(2000, 0.1): sd 13.4; 5 sd either side.
	frac := float64(onCandidate) / sessions
	if math.Abs(float64(onCandidate)-200) > 67 {
		t.Errorf("%d of %d sessions (%.1f%%) on the candidate, want about 10%%", onCandidate, sessions, 100*frac)
	}
	t.Logf("%d of %d sessions (%.1f%%) on the candidate at weight 10", onCandidate, sessions, 100*frac)

	// Without a session, the request ID picks.
	hits := 0
	for i := range 2000 {
		if Picks(booking(fmt.Sprintf("req-%d", i), "", false), Seed(candHash), 10) {
			hits++
		}
	}
	if hits < 133 || hits > 267 {
		t.Errorf("%d of 2000 requests without a session picked at weight 10", hits)
	}
}

// TestRefusedCandidate: a candidate that does not compile is refused; the
// stable config books as before and the status names the error. A stage
// change of the loaded candidate keeps its counts; Clear removes it.
func TestRefusedCandidate(t *testing.T) {
	s := newStage(t, nil)
	st := rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageShadow}
	err := s.Load(dispatch.Config{Doc: []byte("worker_selection:\n  decode:\n    type: no-such-policy\n")}, st, "test")
	if err == nil {
		t.Fatal("a candidate with an unknown policy type loaded")
	}
	if s.Candidate() != nil {
		t.Fatal("a refused candidate runs")
	}
	cs := s.Status()
	if cs == nil || cs.Assigned != candHash || cs.Active != "" || !strings.Contains(cs.Error, "no-such-policy") {
		t.Fatalf("status %+v, want assigned %s, not active, the error naming the policy", cs, candHash)
	}
	// Reread (a poll), the refused candidate is refused again with the
	// same error, in the stage the source now names.
	st.Stage, st.Weight = rolloutapi.StageCanary, 5
	if err2 := s.Load(dispatch.Config{Doc: []byte("worker_selection:\n  decode:\n    type: no-such-policy\n")}, st, "test"); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("the refused candidate reread: %v, want %v", err2, err)
	}
	if cs := s.Status(); cs.Stage != rolloutapi.StageCanary || cs.Weight != 5 || cs.Error != err.Error() {
		t.Fatalf("status %+v after the reread", cs)
	}
	st.Stage, st.Weight = rolloutapi.StageShadow, 0
	h, err := s.Book(context.Background(), booking("r1", "s1", true))
	if err != nil || h.ConfigHash != s.stable.ConfigHash() {
		t.Fatalf("booking with a refused candidate: %v, config %s", err, h.ConfigHash)
	}

	// Once cleared, a candidate is read afresh. (The test gives a working
	// config the refused one's hash; a real hash is of the content.)
	s.Clear()
	if err := s.Load(dispatch.Config{Doc: []byte(noFetchDoc)}, st, "test"); err != nil {
		t.Fatal(err)
	}
	d := s.Candidate()
	if _, err := s.Book(context.Background(), booking("r2", "s2", true)); err != nil {
		t.Fatal(err)
	}
	st.Stage, st.Weight = rolloutapi.StageCanary, 50
	if err := s.Load(dispatch.Config{Doc: []byte(noFetchDoc)}, st, "test"); err != nil {
		t.Fatal(err)
	}
	if s.Candidate() != d {
		t.Error("a stage change of the same candidate replaced its dispatcher")
	}
	if got := s.Shadow()[candHash]; got == nil || got.Bookings != 1 {
		t.Errorf("shadow counts after a stage change: %+v, want the 1 booking counted before", got)
	}
	if cs := s.Status(); cs.Stage != rolloutapi.StageCanary || cs.Weight != 50 || cs.Active != candHash || cs.Error != "" {
		t.Errorf("status %+v after the stage change", cs)
	}
	s.Clear()
	if s.Candidate() != nil || s.Status() != nil || s.Shadow() != nil {
		t.Error("Clear left a candidate")
	}
}

// TestDifferingActions: the action types compared by content, not by
// position.
func TestDifferingActions(t *testing.T) {
	msg := func(actions ...string) []byte {
		var parts []string
		for i, a := range actions {
			typ, payload, _ := strings.Cut(a, "=")
			parts = append(parts, fmt.Sprintf(`{"action_id":"a%d","action_type":%q,"action_version":"1.0","payload":%s}`, i+1, typ, payload))
		}
		return []byte(`{"protocol_version":"0.1","message_id":"m","actions":[` + strings.Join(parts, ",") + `]}`)
	}
	for _, tc := range []struct {
		a, b []byte
		want string
	}{
		{msg(`kv.fetch={"x":1}`, `kv.retain={"t":1}`), msg(`kv.retain={"t":1}`), "[kv.fetch]"},
		{msg(`kv.fetch={"x":1}`, `kv.retain={"t":1}`), msg(`kv.fetch={"x":1}`, `kv.retain={"t":2}`), "[kv.retain]"},
		{msg(`kv.fetch={"x":1}`), nil, "[kv.fetch]"},
		{nil, msg(`kv.evict={}`), "[kv.evict]"},
		{[]byte("{"), msg(), "[unreadable]"},
	} {
		if got := fmt.Sprint(differingActions(tc.a, tc.b)); got != tc.want {
			t.Errorf("differingActions(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

// benchBooking is the benchmarks' booking: a session's turn on w0 with a
// committed copy of 64 hashes.
func benchBooking() *dispatch.Booking {
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	return &dispatch.Booking{RequestID: "req-7f3a9c2e-5b1d-4e8a-9c6f-0d2b3a4e5f60", Role: "decode", Worker: "w0", PromptTokens: 4096, BlockSize: 64,
		Session: hints.Session{ID: "sess-42", Turn: 3}, KVCopy: &hints.CommittedCopy{SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: hashes}}
}

// BenchmarkStageBook is one booking (a committed copy of 64 hashes) through
// the stage in process, with no delivery: the dispatcher alone, the stage
// with no candidate, and a shadow candidate that builds the same hint or
// another one (every booking compared action by action).
func BenchmarkStageBook(b *testing.B) {
	bk := benchBooking()
	ctx := context.Background()
	for _, tc := range []struct {
		name, doc string
		stage     rolloutapi.StageName
	}{
		{"dispatcher", "", ""},
		{"off", "", ""},
		{"shadow-same", stableDoc + "# candidate\n", rolloutapi.StageShadow},
		{"shadow-differ", noFetchDoc, rolloutapi.StageShadow},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := newStage(b, nil)
			book := s.Book
			if tc.name == "dispatcher" {
				book = s.stable.Book
			}
			if tc.doc != "" {
				if err := s.Load(dispatch.Config{Doc: []byte(tc.doc)}, rolloutapi.Stage{Candidate: candHash, Stage: tc.stage}, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := book(ctx, bk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestScanActionsAgainstJSON: the scanner reads the actions that
// encoding/json reads, from real dispatcher messages and from payloads
// whose strings hold the envelope's own delimiters.
func TestScanActionsAgainstJSON(t *testing.T) {
	s := newStage(t, nil)
	real, err := s.stable.Build(context.Background(), booking(`id "quoted" \ },{"action_id":"a9`, "s", true))
	if err != nil || real.Message == nil {
		t.Fatalf("build: %v", err)
	}
	msgs := [][]byte{
		real.Message,
		[]byte(`{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":"a1","action_type":"x.y","action_version":"1.0","payload":{"s":"},{\"action_id\":\"a2\",\"action_type\":\"z\"","n":[1,{"a":[]}],"t":true}},{"action_id":"a2","action_type":"z","action_version":"2.0","payload":{}}]}`),
		[]byte(`{"protocol_version":"0.1","message_id":"m","actions":[]}`),
	}
	for _, msg := range msgs {
		var want struct {
			Actions []struct {
				Type    string          `json:"action_type"`
				Version string          `json:"action_version"`
				Payload json.RawMessage `json:"payload"`
			} `json:"actions"`
		}
		if err := json.Unmarshal(msg, &want); err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		got, ok := scanActions(msg, nil)
		if !ok || len(got) != len(want.Actions) {
			t.Fatalf("scanActions(%s) = %d actions, ok %v; encoding/json reads %d", msg, len(got), ok, len(want.Actions))
		}
		for i, a := range got {
			w := want.Actions[i]
			if string(a.typ) != w.Type || string(a.version) != w.Version || string(a.payload) != string(w.Payload) {
				t.Errorf("action %d: %s %s %s, encoding/json reads %s %s %s", i, a.typ, a.version, a.payload, w.Type, w.Version, w.Payload)
			}
		}
	}
	for _, bad := range []string{`{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":"a1"`, `{}`, `{"protocol_version":"0.1","message_id":"m","actions":[]}x`} {
		if _, ok := scanActions([]byte(bad), nil); ok {
			t.Errorf("scanActions(%s) read a truncated or foreign message", bad)
		}
	}
}

// TestCandidateWithoutTheRole: a candidate without the booked role fails
// the booking; in shadow that counts as candidate_error, in a canary the
// stable config books it.
func TestCandidateWithoutTheRole(t *testing.T) {
	const prefillOnly = "worker_selection:\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: [{type: kv-retain}]\n"
	s := newStage(t, nil)
	ctx := context.Background()
	if err := s.Load(dispatch.Config{Doc: []byte(prefillOnly)}, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageShadow}, "test"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if h, err := s.Book(ctx, booking(fmt.Sprint(i), "s", true)); err != nil || h.ConfigHash != s.stable.ConfigHash() {
			t.Fatalf("shadow booking: %v, config %s", err, h.ConfigHash)
		}
	}
	if got := s.Shadow()[candHash]; got.Bookings != 3 || got.CandidateErrors != 3 || got.Differ != 0 {
		t.Errorf("shadow counts %+v, want 3 bookings, 3 candidate errors", *got)
	}
	if v := testutil.ToFloat64(s.metrics.bookings.WithLabelValues("decode", resultCandidateError)); v != 3 {
		t.Errorf("kvhint_shadow_bookings_total{result=candidate_error} = %v, want 3", v)
	}
	if err := s.Load(dispatch.Config{Doc: []byte(prefillOnly)}, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageCanary, Weight: 100}, "test"); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Book(ctx, booking("c1", "s", true)); err != nil || h.ConfigHash != s.stable.ConfigHash() {
		t.Errorf("a canary booking of a role the candidate lacks: %v, config %s, want the stable config's", err, h.ConfigHash)
	}
}

// BenchmarkCanaryWorkerPools is one canary booking (a committed copy of
// 64 hashes) on a worker of the sidecar's registry, no delivery: the
// candidate held to the stable config's pools (as before: the floor), and
// held to its own (workers.Registry.Candidate), which must cost no
// allocation more.
func BenchmarkCanaryWorkerPools(b *testing.B) {
	bk := benchBooking()
	pool := map[string]labels.Selector{"decode": labels.SelectorFromSet(labels.Set{"component": "decode"})}
	ctx := context.Background()
	for _, name := range []string{"canary-stable-pools", "canary-own-pools"} {
		b.Run(name, func(b *testing.B) {
			reg := workers.NewRegistry(nil)
			reg.SetPools(pool)
			reg.SetCandidatePools(pool)
			if err := reg.Set(workers.SourceAPI, workers.WorkerSpec{ID: "w0", Capabilities: []string{dispatch.CapabilityRouterHint},
				Labels: map[string]string{"component": "decode"}}); err != nil {
				b.Fatal(err)
			}
			opts := dispatch.Options{Catalog: builtin.NewCatalog(), Workers: reg}
			stable := dispatch.NewDispatcher(opts)
			if err := stable.Load([]byte(stableDoc), "bench"); err != nil {
				b.Fatal(err)
			}
			if name == "canary-own-pools" {
				opts.Workers = reg.Candidate()
			}
			s := New(stable, opts, nil)
			if err := s.Load(dispatch.Config{Doc: []byte(noFetchDoc)}, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageCanary, Weight: 100}, "bench"); err != nil {
				b.Fatal(err)
			}
			if h, err := s.Book(ctx, bk); err != nil || h.Outcome != dispatch.OutcomeHinted || h.ConfigHash != candHash {
				b.Fatalf("outcome %v by %q, %v: the benchmark must book a hint with the candidate", h.Outcome, h.ConfigHash, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Book(ctx, bk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
