package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// The configs of a staged rollout: the stable one fetches the booking's
// committed copy and retains the session's blocks; the candidate drops
// kv-fetch; the broken one names a policy type the catalog lacks.
const (
	fetchConfig = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-fetch
      - type: kv-retain
        parameters: {ttl_seconds: 600}
`
	noFetchConfig = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-retain
        parameters: {ttl_seconds: 600}
`
)

// stagedData is a compiled ConfigMap's data that runs stable and stages
// candidate (both decode under kv) as st says, st.Candidate filled in.
func stagedData(t testing.TB, stable, candidate string, st rolloutapi.Stage) map[string]string {
	t.Helper()
	st.Candidate = compiledHashOf(candidate)
	data, err := compiled.StagedData(compiledData(stable, decodeRoles), compiledData(candidate, decodeRoles), st)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// stagedBooking is turn turn of session, with a committed copy when
// withCopy.
func stagedBooking(id, session string, turn int, withCopy bool) string {
	extra := fmt.Sprintf(`"session":{"id":%q,"turn":%d}`, session, turn)
	if withCopy {
		extra += `,"committed_kv_copy":{"source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,12,13,14]}`
	}
	return bookingJSON(id, "decode", "decode-0", extra)
}

// waitCandidate waits until the stage's candidate status satisfies ok.
func waitCandidate(t *testing.T, s *Sidecar, what string, ok func(*rolloutapi.CandidateStatus) bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, what, func(context.Context) error {
		if cs := s.Stage.Status(); !ok(cs) {
			return fmt.Errorf("candidate status %+v", cs)
		}
		return nil
	})
}

// TestStagedRolloutDir runs a rollout's stages through a mounted compiled
// ConfigMap and real bookings over loopback HTTP, with hints delivered to
// a simulated worker. Planted: the candidate drops kv-fetch.
//
//   - shadow: every booking is answered, and delivered, with the stable
//     config's hint (Kvhint-Config-Hash the stable hash); every booking
//     with a committed copy (a kv.fetch in the stable hint) differs, by
//     kv.fetch, and no other does;
//   - canary 10%: about a tenth of the sessions are answered by the
//     candidate (its hash, no kv.fetch), each session always by the same
//     config;
//   - a candidate that does not load: refused with its error, the stable
//     config answers every booking;
//   - no stage: the candidate's dispatcher is gone.
func TestStagedRolloutDir(t *testing.T) {
	k := newKubeletDir(t, fetchConfig)
	s := startSidecar(t, testCatalog(t), "", func(o *Options) { o.ConfigFile, o.ConfigDir, o.Poll = "", k.dir, 50*time.Millisecond })
	stableHash, candHash := compiledHashOf(fetchConfig), compiledHashOf(noFetchConfig)
	waitHash(t, s.Dispatcher, stableHash)
	w := startWorker(t, "decode-0")
	registerWorker(t, s, w)

	// Shadow.
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageShadow}))
	waitCandidate(t, s, "the candidate loaded in shadow", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Stage == rolloutapi.StageShadow
	})
	const n = 40
	withCopy := 0
	for i := range n {
		copied := i%4 != 0
		if copied {
			withCopy++
		}
		resp := post(t, s, booking.Path, stagedBooking(fmt.Sprintf("shadow-%d", i), fmt.Sprintf("s%d", i), 1, copied))
		if resp.status != http.StatusOK {
			t.Fatalf("shadow booking %d: %d %s", i, resp.status, resp.body)
		}
		if got := resp.header.Get(booking.HeaderConfigHash); got != stableHash {
			t.Fatalf("shadow booking %d answered with config %q, want the stable %s", i, got, stableHash)
		}
		if fetch := strings.Contains(resp.body, `"`+hints.ActionKVFetch+`"`); fetch != copied {
			t.Fatalf("shadow booking %d: kv.fetch in the answer %v, want %v: %s", i, fetch, copied, resp.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := w.WaitForHints(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	fetches := 0
	for _, h := range got {
		if strings.Contains(string(h.Body), `"`+hints.ActionKVFetch+`"`) {
			fetches++
		}
	}
	if len(got) != n || fetches != withCopy {
		t.Errorf("the worker received %d hints, %d with kv.fetch; want %d, %d (the stable config's, and only those)", len(got), fetches, n, withCopy)
	}
	sc := s.Stage.Shadow()[candHash]
	want := rolloutapi.ShadowCounts{Bookings: n, Differ: int64(withCopy),
		ByAction: map[string]int64{hints.ActionKVFetch: int64(withCopy)}, ByRole: map[string]int64{"decode": int64(withCopy)}}
	if sc == nil || fmt.Sprint(*sc) != fmt.Sprint(want) {
		t.Errorf("shadow counts %+v, want %+v", sc, want)
	}
	for _, tc := range []struct {
		metric string
		labels map[string]string
		want   int
	}{
		{"kvhint_shadow_bookings_total", map[string]string{"role": "decode", "result": "differ"}, withCopy},
		{"kvhint_shadow_bookings_total", map[string]string{"role": "decode", "result": "same"}, n - withCopy},
		{"kvhint_shadow_action_diff_total", map[string]string{"role": "decode", "action": hints.ActionKVFetch}, withCopy},
	} {
		if v := gathered(t, s.Metrics, tc.metric, tc.labels); v != float64(tc.want) {
			t.Errorf("%s%v = %v, want %d", tc.metric, tc.labels, v, tc.want)
		}
	}
	t.Logf("shadow: %d of %d bookings differ, by action %v", sc.Differ, sc.Bookings, sc.ByAction)

	// Canary, 10% of sessions.
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageCanary, Weight: 10}))
	waitCandidate(t, s, "the candidate in a 10% canary", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Stage == rolloutapi.StageCanary && cs.Weight == 10
	})
	const sessions, turns = 400, 2
	onCandidate := 0
	for i := range sessions {
		var first string
		for turn := 1; turn <= turns; turn++ {
			resp := post(t, s, booking.Path, stagedBooking(fmt.Sprintf("canary-%d-%d", i, turn), fmt.Sprintf("session-%d", i), turn, true))
			if resp.status != http.StatusOK {
				t.Fatalf("canary booking: %d %s", resp.status, resp.body)
			}
			h := resp.header.Get(booking.HeaderConfigHash)
			if h != stableHash && h != candHash {
				t.Fatalf("booking answered with config %q, neither stable %s nor candidate %s", h, stableHash, candHash)
			}
			if fetch := strings.Contains(resp.body, `"`+hints.ActionKVFetch+`"`); fetch != (h == stableHash) {
				t.Fatalf("config %s answered a hint with kv.fetch=%v: %s", h, fetch, resp.body)
			}
			if turn == 1 {
				first = h
			} else if h != first {
				t.Fatalf("session %d: turn %d booked with %s, turn 1 with %s", i, turn, h, first)
			}
		}
		if first == candHash {
			onCandidate++
		}
	}
	// Binomial(400, 0.1): mean 40, sd 6; 4 sd either side.
	if onCandidate < 16 || onCandidate > 64 {
		t.Errorf("%d of %d sessions on the candidate at weight 10, want about 40", onCandidate, sessions)
	}
	t.Logf("canary 10%%: %d of %d sessions (%.1f%%) booked by the candidate", onCandidate, sessions, 100*float64(onCandidate)/sessions)

	// A candidate that does not load.
	k.swapData(stagedData(t, fetchConfig, invalidConfig, rolloutapi.Stage{Stage: rolloutapi.StageShadow}))
	waitCandidate(t, s, "the broken candidate refused", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Assigned == compiledHashOf(invalidConfig) && cs.Active == "" && strings.Contains(cs.Error, "no-such-policy")
	})
	if s.Stage.Candidate() != nil || s.Stage.Shadow() != nil {
		t.Error("a refused candidate runs")
	}
	for i := range 20 {
		resp := post(t, s, booking.Path, stagedBooking(fmt.Sprintf("refused-%d", i), fmt.Sprintf("r%d", i), 1, true))
		if resp.status != http.StatusOK || resp.header.Get(booking.HeaderConfigHash) != stableHash {
			t.Fatalf("booking beside a refused candidate: %d, config %q, want 200 and %s", resp.status, resp.header.Get(booking.HeaderConfigHash), stableHash)
		}
	}
	if s.Dispatcher.ConfigHash() != stableHash {
		t.Errorf("the stable config is %s, want %s", s.Dispatcher.ConfigHash(), stableHash)
	}

	// The rollout ends: no stage.
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageCanary, Weight: 100}))
	waitCandidate(t, s, "the candidate at 100%", func(cs *rolloutapi.CandidateStatus) bool { return cs != nil && cs.Weight == 100 })
	if resp := post(t, s, booking.Path, stagedBooking("all-1", "x", 1, true)); resp.header.Get(booking.HeaderConfigHash) != candHash {
		t.Errorf("a booking at weight 100 answered with config %q, want %s", resp.header.Get(booking.HeaderConfigHash), candHash)
	}
	k.swapData(compiledData(fetchConfig, decodeRoles))
	waitCandidate(t, s, "the candidate removed", func(cs *rolloutapi.CandidateStatus) bool { return cs == nil })
	if s.Stage.Candidate() != nil {
		t.Error("the candidate's dispatcher outlives its stage")
	}
	if resp := post(t, s, booking.Path, stagedBooking("after-1", "x", 2, true)); resp.header.Get(booking.HeaderConfigHash) != stableHash {
		t.Errorf("a booking after the rollout answered with config %q, want %s", resp.header.Get(booking.HeaderConfigHash), stableHash)
	}
}
