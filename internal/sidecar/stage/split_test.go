package stage

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/tracesynth"
)

// chi2Limit99 is the 0.999 quantile of the chi-square distribution of 99
// degrees of freedom: 100 uniform buckets exceed it once in 1,000.
const chi2Limit99 = 148.2

// TestPicksUniform puts session IDs of several kinds in the canary's 100
// buckets (the smallest weight that picks each) and checks that every
// ID is picked at that weight and each larger one, never below (a
// session on the canary stays on it as the weight grows), and that the
// buckets fill evenly: chi-square of 99 degrees of freedom under its
// 0.999 quantile, and no bucket's share off 1% by more than 5 standard
// deviations. The kinds: the session IDs the real conversation trace gets
// from tracesynth.ChainSessions ("c" and a counter), the dev front
// router's ("<pod>-<time>-sess-" and a counter), random UUIDs, and
// counters behind a shared prefix.
func TestPicksUniform(t *testing.T) {
	kinds := map[string][]string{}
	if dir, _ := tracesynth.MooncakeDir(); dir != "" {
		kinds["conversation trace, chained"] = chainedSessionIDs(t, filepath.Join(dir, "conversation_trace.jsonl"))
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 100000 {
		kinds["dev front router"] = append(kinds["dev front router"], fmt.Sprintf("llama-7f3k2a-sess-%d", i+1))
		kinds["counter behind a prefix"] = append(kinds["counter behind a prefix"], fmt.Sprintf("session-%d", i))
		kinds["random UUID"] = append(kinds["random UUID"], fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x",
			rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xfff, 0x8000|rng.Uint32()&0x3fff, rng.Uint64()&0xffffffffffff))
	}
	// Salted as a rollout salts it, by a candidate's config hash.
	seed := Seed("3f9a1c0d5e7b2468")
	for kind, ids := range kinds {
		var buckets [100]int
		for _, id := range ids {
			b := booking("r", id, false)
			first := 0
			for w := uint64(1); w <= 100; w++ {
				picked := Picks(b, seed, w)
				switch {
				case picked && first == 0:
					first = int(w)
				case !picked && first != 0:
					t.Fatalf("%s: session %q picked at weight %d, not at %d", kind, id, first, w)
				}
			}
			if first == 0 {
				t.Fatalf("%s: session %q not picked at weight 100", kind, id)
			}
			buckets[first-1]++
		}
		n := float64(len(ids))
		want := n / 100
		var chi2, worst float64
		for _, c := range buckets {
			d := float64(c) - want
			chi2 += d * d / want
			worst = max(worst, math.Abs(d))
		}
		sd := math.Sqrt(n * 0.01 * 0.99)
		t.Logf("%s: %d sessions, chi-square %.1f (99 df, limit %.1f), largest deviation %.0f (%.1f sd)", kind, len(ids), chi2, chi2Limit99, worst, worst/sd)
		if chi2 > chi2Limit99 || worst > 5*sd {
			t.Errorf("%s: the 100 buckets are uneven: chi-square %.1f, largest deviation %.1f sd", kind, chi2, worst/sd)
		}
	}
}

// TestPicksSaltedByCandidate: two candidates at weight 10 pick sessions
// independently of each other (about 1% of sessions on both, not the 10%
// an unsalted split would put on both), while one candidate picks the
// same sessions wherever it runs.
func TestPicksSaltedByCandidate(t *testing.T) {
	const n = 100000
	a, b := Seed("3f9a1c0d5e7b2468"), Seed("c4d2e0f1a3b59786")
	both, onA := 0, 0
	for i := range n {
		bk := booking("r", fmt.Sprintf("session-%d", i), false)
		pa := Picks(bk, a, 10)
		if pa != Picks(booking("other-request", fmt.Sprintf("session-%d", i), false), a, 10) {
			t.Fatalf("session-%d: picked by one booking of candidate a, not by another", i)
		}
		if pa {
			onA++
			if Picks(bk, b, 10) {
				both++
			}
		}
	}
	// Binomial(100000, 0.01): sd 31.5; 6 sd either side.
	if both < 1000-190 || both > 1000+190 {
		t.Errorf("%d of %d sessions picked by both candidates at weight 10 (a alone picked %d), want about 1,000", both, n, onA)
	}
	t.Logf("%d of %d sessions picked by candidate a, %d by both a and b", onA, n, both)
}

// chainedSessionIDs reads the session IDs tracesynth.ChainSessions gives
// the trace's rows, one per session.
func chainedSessionIDs(t *testing.T, path string) []string {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := tracesynth.ChainSessions(bytes.NewReader(in), &out, 512, 2); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var ids []string
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var row struct {
			Session string `json:"session_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		if !seen[row.Session] {
			seen[row.Session] = true
			ids = append(ids, row.Session)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}
