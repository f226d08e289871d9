package preview

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/tracesynth"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

const testBlock = 16

// trace builds a JSONL trace from rows written as
// "at in out session ids...", session "-" for none.
func trace(t *testing.T, lines ...string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		var at, in, out int
		var sess string
		f := strings.Fields(l)
		if _, err := fmt.Sscan(strings.Join(f[:4], " "), &at, &in, &out, &sess); err != nil {
			t.Fatalf("row %q: %v", l, err)
		}
		fmt.Fprintf(&b, `{"timestamp":%d,"input_length":%d,"output_length":%d,"hash_ids":[%s]`, at, in, out, strings.Join(f[4:], ","))
		if sess != "-" {
			fmt.Fprintf(&b, `,"session_id":%q`, sess)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func ids(from, n int) string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprint(from+i))
	}
	return strings.Join(s, " ")
}

func assumptions(workers, cache int) Assumptions {
	a := DefaultAssumptions()
	a.BlockSize = testBlock
	a.Topology = Topology{Default: RoleTopology{Workers: workers, CacheBlocks: cache}}
	return a
}

func replay(t *testing.T, doc string, tr string, a Assumptions) *Result {
	t.Helper()
	rows, err := ReadTrace(strings.NewReader(tr), a.BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(builtin.NewCatalog(), Config{Name: "test", Doc: []byte(doc)}, rows, a)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.4f, want %.4f within %.4f", what, got, want, tol)
	}
}

// Sessions whose second turn repeats their first turn's prompt, with a
// filler between them that fills the whole cache: without kv.retain the
// second turn finds nothing; with it, it finds the whole first prompt.
// By construction each session contributes P cached blocks out of
// P + C + (P+1) prompt blocks, so the hit ratio gains P/(2P+C+1).
func TestPlantedRetain(t *testing.T) {
	const P, C, S = 4, 8, 10
	var rows []string
	next := 1000
	for i := range S {
		at := 10000 * i
		first := ids(next, P)
		next += P
		rows = append(rows,
			fmt.Sprintf("%d %d 0 s%d %s", at, P*testBlock, i, first),
			fmt.Sprintf("%d %d 0 - %s", at+1000, C*testBlock, ids(next, C)),
			fmt.Sprintf("%d %d 0 s%d %s %d", at+2000, (P+1)*testBlock, i, first, next+C))
		next += C + 1
	}
	tr := trace(t, rows...)
	a := assumptions(1, C)
	base := replay(t, "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n", tr, a).Roles["aggregated"]
	head := replay(t, "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: kv-retain\n        parameters: {ttl_seconds: 5}\n", tr, a).Roles["aggregated"]
	const tol = 1e-9
	within(t, "base hit ratio", base.HitRatio(), 0, tol)
	within(t, "hit ratio gain from kv.retain", head.HitRatio()-base.HitRatio(), float64(P)/float64(2*P+C+1), tol)
	if head.RetainedBlocks != S*P || head.RetainedReused != S*P || head.RetainedExpiredUnused != 0 {
		t.Errorf("retained %d, reused %d, expired unused %d; want %d, %d, 0", head.RetainedBlocks, head.RetainedReused, head.RetainedExpiredUnused, S*P, S*P)
	}
	if want := int64(S * P * testBlock); base.PrefillTokens-head.PrefillTokens != want {
		t.Errorf("prefill tokens saved = %d, want %d", base.PrefillTokens-head.PrefillTokens, want)
	}
	if head.WithAction["kv.retain"] != S {
		t.Errorf("bookings with kv.retain = %d, want %d (the first turns)", head.WithAction["kv.retain"], S)
	}
}

// A final turn's kv.evict frees its blocks at completion, so a later
// filler no longer pushes out a session still running, whose next turn
// then hits: 4 cached blocks more out of 17 prompt blocks.
func TestPlantedEvict(t *testing.T) {
	tr := trace(t,
		"0 64 0 b "+ids(1, 4),         // session b, turn 1
		"1000 64 0 a "+ids(10, 4),     // session a, one final turn
		"2000 64 0 x "+ids(20, 4),     // session x, one final turn: the pressure
		"3000 80 0 b "+ids(1, 4)+" 5", // session b, turn 2 repeats turn 1
	)
	a := assumptions(1, 8)
	base := replay(t, "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n", tr, a).Roles["aggregated"]
	head := replay(t, "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: kv-evict\n", tr, a).Roles["aggregated"]
	within(t, "base hit ratio", base.HitRatio(), 0, 1e-9)
	within(t, "hit ratio gain from kv.evict", head.HitRatio()-base.HitRatio(), 4.0/17, 1e-9)
	if head.EvictedBlocks != 4+4+5 || head.EvictedAskedAgain != 0 {
		t.Errorf("evicted %d, asked again %d; want 13, 0", head.EvictedBlocks, head.EvictedAskedAgain)
	}
}

// Under --evict-in-use oracle, kv.evict leaves the blocks a later row
// reads: session a's final turn shares its four blocks with session c's
// later first turn, which misses them under keep and hits them under
// oracle (4 of 9 prompt blocks).
func TestEvictOracleKeepsBlocksReadLater(t *testing.T) {
	tr := trace(t,
		"0 64 0 a "+ids(10, 4),
		"2000 80 0 c "+ids(10, 4)+" 30",
	)
	doc := "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: kv-evict\n"
	for _, c := range []struct {
		mode                 EvictInUse
		hit                  float64
		evicted, again, kept int
	}{
		{EvictKeep, 0, 4 + 5, 4, 0},
		{EvictOracle, 4.0 / 9, 5, 0, 4},
	} {
		a := assumptions(1, 8)
		a.EvictInUse = c.mode
		st := replay(t, doc, tr, a).Roles["aggregated"]
		within(t, string(c.mode)+" hit ratio", st.HitRatio(), c.hit, 1e-9)
		if st.EvictedBlocks != c.evicted || st.EvictedAskedAgain != c.again || st.EvictKeptInUse != c.kept {
			t.Errorf("%s: evicted %d, asked again %d, kept %d; want %d, %d, %d", c.mode,
				st.EvictedBlocks, st.EvictedAskedAgain, st.EvictKeptInUse, c.evicted, c.again, c.kept)
		}
	}
}

// Under kvcr on a disaggregated router, the decode worker lacks the blocks
// the prefill worker just computed, so kvcr commits a copy of them from
// it. The copy becomes a kv.fetch, and the decode worker hits every block,
// only when the source advertises its control endpoint; without it the
// dispatcher drops the copy and the decode worker hits nothing.
func TestPlantedDisaggregatedFetch(t *testing.T) {
	const N, B = 20, 6
	var rows []string
	for i := range N {
		rows = append(rows, fmt.Sprintf("%d %d 10 - %s", 100*i, B*testBlock, ids(100*i, B)))
	}
	tr := trace(t, rows...)
	doc := "worker_selection:\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: []\n  decode: kvcr\n"
	with := assumptions(2, 4096)
	without := assumptions(2, 4096)
	no := false
	without.Topology.Roles = map[string]RoleTopology{"prefill": {SourceEndpoints: &no}}

	got := replay(t, doc, tr, with).Roles["decode"]
	if got.CopiesCommitted != N || got.CopiesDropped != 0 || got.WithAction["kv.fetch"] != N {
		t.Errorf("with a source: copies %d, dropped %d, fetches %d; want %d, 0, %d", got.CopiesCommitted, got.CopiesDropped, got.WithAction["kv.fetch"], N, N)
	}
	within(t, "decode hit ratio with a source", got.HitRatio(), 1, 1e-9)
	if got.FetchedUsed != N*B || got.FetchedWasted != 0 {
		t.Errorf("fetched used %d, wasted %d; want %d, 0", got.FetchedUsed, got.FetchedWasted, N*B)
	}

	got = replay(t, doc, tr, without).Roles["decode"]
	if got.CopiesCommitted != N || got.CopiesDropped != N || got.WithAction["kv.fetch"] != 0 {
		t.Errorf("without a source: copies %d, dropped %d, fetches %d; want %d, %d, 0", got.CopiesCommitted, got.CopiesDropped, got.WithAction["kv.fetch"], N, N)
	}
	within(t, "decode hit ratio without a source", got.HitRatio(), 0, 1e-9)
}

func synth(t *testing.T, rows int) string { return synthTrace(t, rows, testBlock) }

// synthTrace is a synthesized trace (tracesynth's defaults, seed 1) of
// rows rows with blockSize tokens an id.
func synthTrace(tb testing.TB, rows, blockSize int) string {
	tb.Helper()
	o := tracesynth.Defaults()
	o.Rows = rows
	o.BlockSize = blockSize
	r, err := tracesynth.Generate(o)
	if err != nil {
		tb.Fatal(err)
	}
	var b bytes.Buffer
	if err := tracesynth.Write(&b, r); err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

const retainDoc = `worker_selection:
  aggregated:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-retain
        parameters: {ttl_seconds: 30, min_prompt_tokens: %d}
      - type: kv-evict
`

func run(t *testing.T, baseDoc, headDoc, tr string, a Assumptions) *Report {
	t.Helper()
	rep, err := Run(builtin.NewCatalog(), Config{Name: "base", Doc: []byte(baseDoc)}, Config{Name: "head", Doc: []byte(headDoc)}, strings.NewReader(tr), a)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestIdenticalConfigsDoNotDiffer(t *testing.T) {
	tr := synth(t, 500)
	doc := fmt.Sprintf(retainDoc, 0)
	rep := run(t, doc, doc, tr, assumptions(4, 64))
	if rep.Differs {
		t.Fatal("identical configs differ")
	}
	for _, r := range rep.Roles {
		if r.Changed != 0 || len(r.Examples) != 0 {
			t.Errorf("role %s: %d bookings changed", r.Role, r.Changed)
		}
	}
}

// Raising kv-retain's min_prompt_tokens changes exactly the bookings that
// lose their kv.retain: non-final session turns with shorter prompts.
func TestOneParameterChangeTouchesOnlyItsBookings(t *testing.T) {
	const limit = 1500
	tr := synth(t, 500)
	rows, err := ReadTrace(strings.NewReader(tr), testBlock)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, r := range rows {
		if r.Session != "" && !r.Final && r.InputTokens < limit {
			want[r.RequestID] = true
		}
	}
	if len(want) == 0 {
		t.Fatal("the trace has no booking the change touches; the test proves nothing")
	}
	rep := run(t, fmt.Sprintf(retainDoc, 0), fmt.Sprintf(retainDoc, limit), tr, assumptions(4, 64))
	if !rep.Differs {
		t.Fatal("a change of min_prompt_tokens does not differ")
	}
	r := rep.Roles[0]
	if r.Changed != len(want) {
		t.Errorf("changed bookings = %d, want %d", r.Changed, len(want))
	}
	for _, c := range r.Examples {
		if !want[c.RequestID] || !slices.Contains(c.Base, "kv.retain(ttl 30s, priority 50)") || slices.ContainsFunc(c.Head, func(s string) bool { return strings.HasPrefix(s, "kv.retain") }) {
			t.Errorf("example %+v is not a booking that loses its kv.retain", c)
		}
	}
}

// The report is the same bytes for the same inputs and seed.
func TestReportDeterministic(t *testing.T) {
	tr := synth(t, 400)
	a := assumptions(4, 64)
	doc := "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    parameters: {router_temperature: 0.5}\n"
	var outs []string
	for range 2 {
		rep := run(t, "worker_selection:\n  aggregated: dynamo-random\n", doc, tr, a)
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteMarkdown(&b); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Error("two runs wrote different reports")
	}
}

// A recorded trace replays as it is: with --choices recorded the booked
// workers and committed copies are the recorded ones, and under the config
// the recording ran the actions the dispatcher builds are the ones
// recorded, booking by booking.
func TestRecordedTraceReplaysItsActions(t *testing.T) {
	tr := `{"timestamp":0,"request_id":"r1","role":"prefill","worker":"p-a","input_length":64,"hash_ids":[1,2,3,4],"session_id":"1","turn":1,"final":false,"actions":[]}
{"timestamp":0,"request_id":"r1","role":"decode","worker":"d-a","input_length":64,"hash_ids":[1,2,3,4],"session_id":"1","turn":1,"final":false,"committed_kv_copy":{"source_worker":"p-a","block_hashes":[1,2,3,4]},"actions":["kv.fetch","kv.retain"]}
{"timestamp":5,"request_id":"r2","role":"decode","worker":"d-b","input_length":80,"session_id":"1","turn":2,"final":true,"committed_kv_copy":{"source_worker":"p-a","source_endpoint":"tcp://127.0.0.1:23280","block_hashes":[1,2]},"actions":["kv.fetch","kv.evict"]}
{"timestamp":9,"request_id":"r3","role":"decode","worker":"d-a","input_length":16,"actions":[]}
`
	doc := "worker_selection:\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: []\n  decode:\n    type: kvcr\n    hints:\n      - type: kv-fetch\n      - type: kv-retain\n      - type: kv-evict\n"
	a := assumptions(1, 64)
	a.RecordedChoices = true
	rows, err := ReadTrace(strings.NewReader(tr), testBlock)
	if err != nil {
		t.Fatal(err)
	}
	res := replay(t, doc, tr, a)
	if len(res.Bookings) != len(rows) {
		t.Fatalf("%d bookings, want %d", len(res.Bookings), len(rows))
	}
	for i, b := range res.Bookings {
		var types []string
		for _, act := range b.Actions {
			types = append(types, strings.SplitN(act, "(", 2)[0])
		}
		if !slices.Equal(types, rows[i].Actions) && !(len(types) == 0 && len(rows[i].Actions) == 0) {
			t.Errorf("booking %s %s: actions %v, recorded %v", b.RequestID, b.Role, types, rows[i].Actions)
		}
		if b.Worker != rows[i].Worker {
			t.Errorf("booking %s %s: worker %s, recorded %s", b.RequestID, b.Role, b.Worker, rows[i].Worker)
		}
	}
	if d := res.Roles["decode"]; d.FetchedUsed != 4+2 || d.CachedBlocks != 4+2 {
		t.Errorf("decode fetched used %d, cached %d; want 6 and 6 (the recorded copies, from p-a's cache)", d.FetchedUsed, d.CachedBlocks)
	}
}

// Every retention ends once, read while retained or not: the two counts
// add up to the retentions, under either evict semantics, with retentions
// renewed before they end (a session's turns) and blocks evicted while
// retained.
func TestRetainedPartition(t *testing.T) {
	tr := synthTrace(t, 2000, tracesynth.Defaults().BlockSize)
	doc := "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: kv-retain\n        parameters: {ttl_seconds: 30}\n      - type: kv-evict\n"
	for _, mode := range []EvictInUse{EvictKeep, EvictFree} {
		a := DefaultAssumptions()
		a.EvictInUse = mode
		a.Topology.Default.CacheBlocks = 64
		st := replay(t, doc, tr, a).Roles["aggregated"]
		if st.RetainedBlocks == 0 || st.RetainedReused == 0 || st.RetainedExpiredUnused == 0 {
			t.Fatalf("%s: retained %d, read %d, unread %d; want all above 0", mode, st.RetainedBlocks, st.RetainedReused, st.RetainedExpiredUnused)
		}
		if st.RetainedReused+st.RetainedExpiredUnused != st.RetainedBlocks {
			t.Errorf("%s: retained %d != read %d + unread %d", mode, st.RetainedBlocks, st.RetainedReused, st.RetainedExpiredUnused)
		}
	}
}

// A disaggregated router's end-to-end TTFT is, per request, its prefill
// booking's TTFT, its decode booking's, and one output token; a router
// without both roles has none.
func TestEndToEndTTFT(t *testing.T) {
	const rows = 1000
	a := DefaultAssumptions()
	tr := synthTrace(t, rows, tracesynth.Defaults().BlockSize)
	res := replay(t, benchBase, tr, a)
	if res.EndToEnd == nil || res.EndToEnd.Requests != rows {
		t.Fatalf("end to end %+v; want %d requests", res.EndToEnd, rows)
	}
	sum := map[string]float64{}
	for _, b := range res.Bookings {
		sum[b.RequestID] += b.TTFTMS
	}
	total := 0.0
	for _, v := range sum {
		total += v + a.DecodeMSPerToken
	}
	within(t, "end-to-end TTFT mean", res.EndToEnd.MeanMS, total/float64(len(sum)), 1e-6)
	if res.EndToEnd.P50MS > res.EndToEnd.P90MS || res.EndToEnd.P90MS > res.EndToEnd.P99MS {
		t.Errorf("percentiles out of order: %+v", res.EndToEnd)
	}
	if agg := replay(t, "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n", tr, a); agg.EndToEnd != nil {
		t.Errorf("an aggregated router has an end-to-end TTFT: %+v", agg.EndToEnd)
	}
}

// A change to the hints of a role no row is booked for cannot show: the
// verdict says which role and that it got no booking.
func TestCannotTellRoleWithoutBookings(t *testing.T) {
	tr := `{"timestamp":0,"input_length":64,"output_length":4,"hash_ids":[1,2,3,4],"role":"decode"}
{"timestamp":10,"input_length":64,"output_length":4,"hash_ids":[1,2,3,5],"role":"decode"}
`
	a := assumptions(2, 64)
	r, err := Run(builtin.NewCatalog(), Config{Name: "base", Doc: []byte(benchBase)}, Config{Name: "head", Doc: []byte(benchHead)}, strings.NewReader(tr), a)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict.Word != VerdictCannotTell || !slices.ContainsFunc(r.Verdict.Reasons, func(s string) bool {
		return strings.HasPrefix(s, "role prefill got 0 bookings from the trace, so its change to kv-fetch cannot act")
	}) {
		t.Errorf("verdict %+v; want cannot tell, naming role prefill", r.Verdict)
	}
}
