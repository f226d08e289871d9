package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// TestOutcomes books through bookingapi's client against a running
// sidecar, reports each request's outcome under the config hash the
// booking answered, and reads them back from the ops listener and the
// metrics; oversized and invalid outcomes are refused with what is wrong.
func TestOutcomes(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) { o.PodName = "" })
	w := startWorker(t, "w")
	registerWorker(t, s, w)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bookingapi.NewClient("http://"+s.BookingAddr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UnixMilli()
	var hash string
	for i, cached := range []int{0, 48, 64} {
		b := &bookingapi.Booking{RequestID: fmt.Sprint("r", i), Role: "decode", Worker: "w", PromptTokens: 64, BlockSize: 16}
		if i < 2 {
			// A final turn: the config answers a hint (200); the last
			// booking has none (204). Both carry the hash.
			b.Session = hints.Session{ID: fmt.Sprint("s", i), Turn: 1, Final: true}
		}
		a, err := c.BookAnswer(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if want := s.Dispatcher.ConfigHash(); a.ConfigHash != want || (a.Message != nil) != (i < 2) {
			t.Fatalf("booking %d answered config hash %q and hint %s; want %q and a hint only on a final turn", i, a.ConfigHash, a.Message, want)
		}
		hash = a.ConfigHash
		o := &bookingapi.Outcome{RequestID: fmt.Sprint("r", i), SessionID: b.Session.ID, Role: "decode", Worker: "w", ConfigHash: a.ConfigHash,
			PromptTokens: 64, CachedTokens: cached, TTFTSeconds: 0.01 * float64(i+1)}
		if i == 2 {
			o.Error = "worker answered 503"
		}
		if err := c.ReportOutcome(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	got := getOutcomes(t, s, start)
	co := got.Configs[hash]
	if co == nil || len(got.Configs) != 1 || len(co.Samples) != 3 {
		t.Fatalf("outcomes served: %+v; want 3 samples of config %s", got.Configs, hash)
	}
	var cached, errs int64
	for _, smp := range co.Samples {
		cached += smp.Cached
		if smp.Error {
			errs++
		}
		if smp.At < start || smp.Prompt != 64 || smp.Role != "decode" {
			t.Errorf("sample %+v: want at or after %d, 64 prompt tokens, role decode", smp, start)
		}
	}
	if cached != 112 || errs != 1 || co.Samples[1].TTFTMicros != 20000 {
		t.Errorf("samples %+v: want 112 cached tokens in all, 1 error, the second's TTFT 20000 µs", co.Samples)
	}
	// The sessions come back as their keys, the same in every pod; the
	// request outside a session has none.
	if got, want := []uint64{co.Samples[0].Session, co.Samples[1].Session, co.Samples[2].Session},
		[]uint64{rolloutapi.SessionKey("s0"), rolloutapi.SessionKey("s1"), 0}; !slices.Equal(got, want) || got[0] == got[1] {
		t.Errorf("session keys %v, want %v (distinct, and 0 outside a session)", got, want)
	}
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"kvhint_outcome_requests_total", map[string]string{"role": "decode", "config_hash": hash, "result": "ok"}, 2},
		{"kvhint_outcome_requests_total", map[string]string{"role": "decode", "config_hash": hash, "result": "error"}, 1},
		{"kvhint_outcome_prompt_tokens_total", map[string]string{"role": "decode", "config_hash": hash}, 192},
		{"kvhint_outcome_cached_tokens_total", map[string]string{"role": "decode", "config_hash": hash}, 112},
	} {
		if got := gathered(t, s.Metrics, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}

	big := fmt.Sprintf(`{"role":"decode","config_hash":%q,"prompt_tokens":1,"error":%q}`, hash, strings.Repeat("x", bookingapi.MaxOutcomeBytes))
	if r := post(t, s, bookingapi.OutcomesPath, big); r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, fmt.Sprintf("over the %d-byte limit", bookingapi.MaxOutcomeBytes)) {
		t.Errorf("an oversized outcome: %d %s; want 413 naming the limit", r.status, r.body)
	}
	for body, want := range map[string]string{
		`{"role":"decode","config_hash":"nothex","prompt_tokens":1}`:                                                                                  `config_hash \"nothex\" is not a config hash`,
		`{"role":"decode","config_hash":"` + hash + `","prompt_tokens":1,"cached_tokens":2}`:                                                          "cached_tokens 2 is not within 0 and prompt_tokens (1)",
		`{"role":"decode","config_hash":"` + hash + `","prompt_tokns":1}`:                                                                             "prompt_tokns",
		`{"role":"decode","config_hash":"` + hash + `","prompt_tokens":1,"session_id":"` + strings.Repeat("s", bookingapi.MaxSessionIDBytes+1) + `"}`: "session_id is 257 bytes, over 256",
	} {
		if r := post(t, s, bookingapi.OutcomesPath, body); r.status != http.StatusBadRequest || !strings.Contains(r.body, want) {
			t.Errorf("outcome %s: %d %s; want 400 saying %s", body, r.status, r.body, want)
		}
	}
	if n := len(s.Outcomes.Since(0)[hash].Samples); n != 3 {
		t.Errorf("%d outcomes kept after the refused ones, want 3", n)
	}

	// Over the booking listener's Unix socket.
	sock := filepath.Join(sidecartest.SocketDir(t), "booking.sock")
	us := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) { o.Listen = listen.UnixScheme + sock })
	uc, err := bookingapi.NewClient("unix://"+sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := uc.ReportOutcome(ctx, &bookingapi.Outcome{Role: "decode", ConfigHash: hash, PromptTokens: 8, CachedTokens: 8}); err != nil {
		t.Fatal(err)
	}
	if got := us.Outcomes.Since(0)[hash]; got == nil || len(got.Samples) != 1 || got.Samples[0].Cached != 8 {
		t.Errorf("the outcome reported over the socket: %+v", got)
	}
}

// TestOutcomesStaged runs a 50% canary through a mounted compiled
// ConfigMap: each booking answers the hash of the config that booked it,
// the outcomes reported under it come back apart by hash from the ops
// route, and a shadow stage's counts are served beside them.
func TestOutcomesStaged(t *testing.T) {
	k, s, _ := startStagedSidecar(t)
	stableHash, candHash := compiledHashOf(fetchConfig), compiledHashOf(noFetchConfig)
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageCanary, Weight: 50}))
	waitCandidate(t, s, "the candidate in a 50% canary", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Stage == rolloutapi.StageCanary
	})
	c, err := bookingapi.NewClient("http://"+s.BookingAddr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now().UnixMilli()
	// Planted: the stable config's requests have 32 of 64 tokens cached,
	// the candidate's none.
	booked := map[string]int{}
	for i := range 60 {
		a, err := c.BookAnswer(ctx, &bookingapi.Booking{RequestID: fmt.Sprint("c", i), Role: "decode", Worker: "decode-0", PromptTokens: 64, BlockSize: 16,
			Session: hints.Session{ID: fmt.Sprint("s", i), Turn: 1}})
		if err != nil {
			t.Fatal(err)
		}
		booked[a.ConfigHash]++
		cached := 32
		if a.ConfigHash == candHash {
			cached = 0
		}
		if err := c.ReportOutcome(ctx, &bookingapi.Outcome{RequestID: fmt.Sprint("c", i), Role: "decode", ConfigHash: a.ConfigHash,
			PromptTokens: 64, CachedTokens: cached, TTFTSeconds: 0.001}); err != nil {
			t.Fatal(err)
		}
	}
	if len(booked) != 2 || booked[stableHash] == 0 || booked[candHash] == 0 {
		t.Fatalf("bookings by config hash %v: want both %s and %s", booked, stableHash, candHash)
	}
	got := getOutcomes(t, s, start)
	for h, n := range booked {
		co := got.Configs[h]
		if co == nil || len(co.Samples) != n {
			t.Fatalf("config %s: %+v, want the %d outcomes reported under it", h, co, n)
		}
		for _, smp := range co.Samples {
			if want := map[string]int64{stableHash: 32, candHash: 0}[h]; smp.Cached != want {
				t.Errorf("config %s: a sample with %d cached tokens, want %d", h, smp.Cached, want)
			}
		}
	}
	t.Logf("canary 50%%: %d outcomes under the stable config, %d under the candidate", booked[stableHash], booked[candHash])

	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageShadow}))
	waitCandidate(t, s, "the candidate in shadow", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Stage == rolloutapi.StageShadow
	})
	for i := range 5 {
		if r := post(t, s, booking.Path, stagedBooking(fmt.Sprint("sh", i), fmt.Sprint("sh", i), 1, true)); r.status != http.StatusOK {
			t.Fatalf("shadow booking: %d %s", r.status, r.body)
		}
	}
	if sc := getOutcomes(t, s, start).Shadow[candHash]; sc == nil || sc.Bookings != 5 || sc.Differ != 5 {
		t.Errorf("shadow counts served: %+v, want 5 bookings, 5 differing (the candidate drops kv-fetch)", sc)
	}
}

// getOutcomes reads the ops route's outcomes since a time.
func getOutcomes(t *testing.T, s *Sidecar, since int64) rolloutapi.Outcomes {
	t.Helper()
	resp, err := http.Get("http://" + s.OpsAddr() + rolloutapi.OutcomesPath + fmt.Sprint("?since=", since))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got rolloutapi.Outcomes
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
