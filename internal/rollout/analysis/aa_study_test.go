package analysis_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/tracesynth"
	"github.com/kvrouter/kv-hint-operator/internal/preview"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/stage"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// The A/A study: how often does the analysis fail a candidate that is
// the stable config itself, and how often does it catch a real harm?
//
// The real Mooncake conversation trace, given sessions by
// tracesynth.ChainSessions, is replayed once through preview's model (the
// real dispatcher, 8 workers a role with LRU prefix caches of 4,096
// blocks of 512 tokens): each request's prompt, cached tokens and TTFT.
// Both arms run that same config, so whichever arm a session lands in,
// its outcomes are the same; a replication takes a window of consecutive
// requests, splits its sessions with the real stage.Picks (session IDs
// salted per replication, so each replication is a fresh split) and
// judges the arms with the real analysis.Judge. The windows are as long
// as it takes for about 200 sessions to land in the canary (the whole
// trace at 1%), roughly what a 30 s measurement of a busy router holds.
//
// Each replication is judged twice: with the samples' session keys (the
// sidecar's samples since outcomes carry a session) and without them
// (each request its own unit, as the analysis judged before). Two configs
// are replayed: aggregated (one outcome a request) and disaggregated
// (prefill with kvcr and kv-fetch, then decode: two outcomes a request,
// of the same session, as test/staged's front router reports them).
//
// The whole study takes some 40 s: `make aa-study` runs it
// (KVHINT_AA_STUDY=1); docs/rollout.md holds its figures.
// TestAASessionsHalfCanary, one of its cells, runs with every test run
// but -short.

const (
	aaReplications = 200
	// aaCanarySessions is the sessions a window puts in the canary, on
	// average.
	aaCanarySessions = 200
)

var aaWeights = []uint64{1, 10, 50, 60}

const (
	aaAggregated    = "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n"
	aaDisaggregated = "worker_selection:\n" +
		"  prefill:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.5, overlap_score_credit: 1}\n" +
		"    hints:\n      - type: kv-fetch\n        parameters: {min_blocks: 4}\n" +
		"  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n"
)

// aaRow is one request of the replay: its session and its outcomes, one
// per role it was booked for.
type aaRow struct {
	id, session string
	outcomes    []rolloutapi.Sample
}

type aaWorkload struct {
	name string
	rows []aaRow
	// sessionsPerRow is the trace's sessions over its rows.
	sessionsPerRow float64
}

var (
	aaMu    sync.Mutex
	aaCache = map[string]*aaWorkload{}
)

// aaReplay replays the chained conversation trace through doc, once per
// test binary.
func aaReplay(t testing.TB, name, doc string) *aaWorkload {
	t.Helper()
	aaMu.Lock()
	defer aaMu.Unlock()
	if w := aaCache[doc]; w != nil {
		return w
	}
	dir, why := tracesynth.MooncakeDir()
	if dir == "" {
		t.Skip("real Mooncake traces absent: " + why)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var chained bytes.Buffer
	if _, err := tracesynth.ChainSessions(bytes.NewReader(raw), &chained, 512, 2); err != nil {
		t.Fatal(err)
	}
	a := preview.DefaultAssumptions()
	a.BlockSize = 512
	a.Topology = preview.Topology{Default: preview.RoleTopology{Workers: 8, CacheBlocks: 4096}}
	a.Sensitivity = false
	rows, err := preview.ReadTrace(&chained, a.BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	res, err := preview.Replay(builtin.NewCatalog(), preview.Config{Name: name, Doc: []byte(doc)}, rows, a)
	if err != nil {
		t.Fatal(err)
	}
	w := &aaWorkload{name: name}
	index := make(map[string]int, len(rows))
	sessions := map[string]bool{}
	for i := range rows {
		index[rows[i].RequestID] = i
		w.rows = append(w.rows, aaRow{id: rows[i].RequestID, session: rows[i].Session})
		sessions[rows[i].Session] = true
	}
	for _, b := range res.Bookings {
		i, ok := index[b.RequestID]
		if !ok {
			t.Fatalf("booking %s of no row", b.RequestID)
		}
		prompt := int64(rows[i].InputTokens)
		w.rows[i].outcomes = append(w.rows[i].outcomes, rolloutapi.Sample{Role: b.Role, Prompt: prompt,
			Cached: min(int64(b.CachedBlocks)*int64(a.BlockSize), prompt), TTFTMicros: int64(b.TTFTMS * 1e3)})
	}
	w.sessionsPerRow = float64(len(sessions)) / float64(len(rows))
	aaCache[doc] = w
	return w
}

// windowFor is the rows a window takes for about canarySessions
// sessions to land in a canary of weight, at most the trace's.
func (w *aaWorkload) windowFor(weight uint64, canarySessions float64) int {
	return min(len(w.rows), int(math.Ceil(canarySessions*100/(float64(weight)*w.sessionsPerRow))))
}

// aaCell is one study cell's count of verdicts.
type aaCell struct {
	failed, judged, inconclusive int
}

func (c aaCell) rate() float64 { return float64(c.failed) / float64(max(c.judged, 1)) }

func (c aaCell) String() string {
	if c.judged == 0 {
		return fmt.Sprintf("- (%d inconclusive)", c.inconclusive)
	}
	s := fmt.Sprintf("%.3f (%d/%d)", c.rate(), c.failed, c.judged)
	if c.inconclusive > 0 {
		s += fmt.Sprintf(", %d inconclusive", c.inconclusive)
	}
	return s
}

// aaStudy judges replications of one weight: cut is the canary's planted
// relative cut of cached tokens (0 for A/A); bySession keeps the
// samples' session keys.
func aaStudy(w *aaWorkload, weight uint64, th analysis.Thresholds, cut float64, bySession bool, canarySessions float64) aaCell {
	window := w.windowFor(weight, canarySessions)
	var cell aaCell
	var base, canary []rolloutapi.Sample
	for rep := range aaReplications {
		rng := rand.New(rand.NewPCG(uint64(rep), weight))
		off := rng.IntN(len(w.rows) - window + 1)
		base, canary = base[:0], canary[:0]
		for _, r := range w.rows[off : off+window] {
			b := dispatch.Booking{RequestID: r.id}
			b.Session.ID = fmt.Sprintf("aa%d-%d/%s", weight, rep, r.session)
			on := stage.Picks(&b, stage.Seed(""), weight)
			for _, s := range r.outcomes {
				if bySession {
					s.Session = rolloutapi.SessionKey(b.Session.ID)
				}
				if on {
					s.Cached = int64(float64(s.Cached) * (1 - cut))
					canary = append(canary, s)
				} else {
					base = append(base, s)
				}
			}
		}
		v := analysis.Judge(th, analysis.Input{Baseline: analysis.ArmFromSamples(base), Canary: analysis.ArmFromSamples(canary)})
		switch v.Phase {
		case analysis.Failed:
			cell.failed++
			cell.judged++
		case analysis.Successful:
			cell.judged++
		default:
			cell.inconclusive++
		}
	}
	return cell
}

// testOnly judges by significance alone: every threshold 0, so the
// false-positive rate is the tests' own, comparable with the
// significance.
func testOnly() analysis.Thresholds {
	th := analysis.DefaultThresholds()
	th.MaxPrefixHitDrop, th.MaxTTFTIncrease, th.MaxErrorRateIncrease, th.MaxHintRejectedIncrease = 0, 0, 0, 0
	return th
}

// TestAAStudy prints the study's table and holds the analysis by
// sessions to its significance: A/A replications fail at most at about
// the significance (0.05, one-sided binomial bound at 99%), and a
// planted 20% cut of the canary's cached tokens is caught at a 50% or
// 60% canary in most replications.
func TestAAStudy(t *testing.T) {
	if os.Getenv("KVHINT_AA_STUDY") != "1" {
		t.Skip("the whole A/A study takes some 40 s: make aa-study (KVHINT_AA_STUDY=1)")
	}
	def := analysis.DefaultThresholds()
	minSamples1 := def
	minSamples1.MinSamples = 50
	var table strings.Builder
	table.WriteString("| config | weight | unit | A/A failed, defaults | A/A failed, tests alone | caught, cut 10% | caught, cut 20% | caught, cut 20%, 4x window |\n|---|---|---|---|---|---|---|---|\n")
	for _, wl := range []struct{ name, doc string }{{"aggregated", aaAggregated}, {"disaggregated", aaDisaggregated}} {
		w := aaReplay(t, wl.name, wl.doc)
		for _, weight := range aaWeights {
			th, zero := def, testOnly()
			note := ""
			if weight == 1 {
				// 100 sessions in a 1% canary take 10,000 sessions, more
				// than the trace holds: judged at 50.
				th.MinSamples, zero.MinSamples = 50, 50
				note = " (minSamples 50)"
			}
			var pooledAA aaCell
			for _, bySession := range []bool{false, true} {
				unit := "requests"
				if bySession {
					unit = "sessions"
				}
				aa, aaTests := aaStudy(w, weight, th, 0, bySession, aaCanarySessions), aaStudy(w, weight, zero, 0, bySession, aaCanarySessions)
				cut10, cut20 := aaStudy(w, weight, th, 0.1, bySession, aaCanarySessions), aaStudy(w, weight, th, 0.2, bySession, aaCanarySessions)
				long := cut20
				if w.windowFor(weight, 4*aaCanarySessions) > w.windowFor(weight, aaCanarySessions) {
					long = aaStudy(w, weight, th, 0.2, bySession, 4*aaCanarySessions)
				}
				fmt.Fprintf(&table, "| %s | %d%%%s | %s | %s | %s | %s | %s | %s |\n", w.name, weight, note, unit, aa, aaTests, cut10, cut20, long)
				if !bySession {
					continue
				}
				pooledAA.failed += aaTests.failed
				pooledAA.judged += aaTests.judged
				if aa.judged > 0 && aa.rate() > bound(def.Significance, aa.judged) {
					t.Errorf("%s at %d%% by sessions: A/A failed %s, above %.3f", w.name, weight, aa, bound(def.Significance, aa.judged))
				}
				if weight >= 10 && long.rate() < 0.8 {
					t.Errorf("%s at %d%% by sessions: a 20%% cut of cached tokens caught in %s of windows of %d canary sessions, want 80%% or more", w.name, weight, long, 4*aaCanarySessions)
				}
			}
			if pooledAA.judged > 0 && pooledAA.rate() > bound(def.Significance, pooledAA.judged) {
				t.Errorf("%s at %d%% by sessions, tests alone: A/A failed %d of %d, above %.3f", w.name, weight, pooledAA.failed, pooledAA.judged, bound(def.Significance, pooledAA.judged))
			}
		}
	}
	t.Logf("A/A study, %d replications a cell, failed share of judged replications:\n%s", aaReplications, table.String())
}

// bound is the rate a binomial(n, p) count stays under with 99%
// probability (normal approximation, one-sided).
func bound(p float64, n int) float64 {
	return p + 2.326*math.Sqrt(p*(1-p)/float64(n))
}

// TestAASessionsHalfCanary is the study's cell of a 50% canary of the
// disaggregated config, with every test run: judged by requests, the
// tests alone fail the A/A split more often than their significance
// (0.085 in 200 when this was written: a request's prefill and decode
// outcomes, and a session's turns, are not independent); judged by
// sessions, within it.
func TestAASessionsHalfCanary(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the Mooncake conversation trace: some 5 s")
	}
	w := aaReplay(t, "disaggregated", aaDisaggregated)
	th := testOnly()
	byRequest := aaStudy(w, 50, th, 0, false, aaCanarySessions)
	bySession := aaStudy(w, 50, th, 0, true, aaCanarySessions)
	t.Logf("A/A at 50%%, tests alone: by requests %s, by sessions %s", byRequest, bySession)
	if limit := bound(th.Significance, bySession.judged); bySession.judged < aaReplications/2 || bySession.rate() > limit {
		t.Errorf("by sessions, A/A failed %s; want at most %.3f of at least %d judged", bySession, limit, aaReplications/2)
	}
	if bySession.failed >= byRequest.failed {
		t.Errorf("by sessions %s, by requests %s: sessions should fail the A/A split less often", bySession, byRequest)
	}
}
