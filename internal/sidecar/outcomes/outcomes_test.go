package outcomes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

const (
	hashA = "aaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbb"
	hashC = "cccccccccccccccc"
)

// stepClock is a clock that moves 1 ms at every reading, from 1000.
type stepClock struct{ ms int64 }

func (c *stepClock) now() time.Time { c.ms++; return time.UnixMilli(999 + c.ms) }

func outcome(hash string, prompt, cached int) *bookingapi.Outcome {
	return &bookingapi.Outcome{Role: "decode", ConfigHash: hash, PromptTokens: prompt, CachedTokens: cached, TTFTSeconds: 0.25}
}

// TestStoreSince plants outcomes at known times and reads back those
// reported since a time, and only those.
func TestStoreSince(t *testing.T) {
	c := &stepClock{}
	s := NewStore(Options{Now: c.now})
	for i := range 6 {
		h := hashA
		if i%2 == 1 {
			h = hashB
		}
		if err := s.Add(outcome(h, 100+i, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Reported at 1000..1005: A at 1000, 1002, 1004; B at 1001, 1003, 1005.
	sample := func(at int64, i int) rolloutapi.Sample {
		return rolloutapi.Sample{At: at, Role: "decode", Prompt: int64(100 + i), Cached: int64(i), TTFTMicros: 250000}
	}
	want := map[string]*rolloutapi.ConfigOutcomes{
		hashA: {Samples: []rolloutapi.Sample{sample(1004, 4)}},
		hashB: {Samples: []rolloutapi.Sample{sample(1003, 3), sample(1005, 5)}},
	}
	if diff := cmp.Diff(want, s.Since(1003)); diff != "" {
		t.Errorf("Since(1003) (-want +got):\n%s", diff)
	}
	if got := s.Since(1006); len(got) != 0 {
		t.Errorf("Since(1006) = %v, want nothing", got)
	}
	if got := len(s.Since(0)[hashA].Samples); got != 3 {
		t.Errorf("Since(0) holds %d samples of %s, want 3", got, hashA)
	}
}

// TestStoreDropsOldest fills a ring past its bound: the oldest go, and a
// query counts those since its start that are gone.
func TestStoreDropsOldest(t *testing.T) {
	c := &stepClock{}
	s := NewStore(Options{PerHash: 4, Now: c.now})
	for i := range 10 {
		if err := s.Add(outcome(hashA, 10, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Reported at 1000..1009; 1006..1009 held, 1000..1005 dropped.
	got := s.Since(0)[hashA]
	var cached []int64
	for _, smp := range got.Samples {
		cached = append(cached, smp.Cached)
	}
	if diff := cmp.Diff([]int64{6, 7, 8, 9}, cached); diff != "" {
		t.Errorf("samples held, by cached tokens (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		since         int64
		held, dropped int
	}{{0, 4, 6}, {1003, 4, 3}, {1005, 4, 1}, {1006, 4, 0}, {1008, 2, 0}} {
		got := s.Since(c.since)[hashA]
		if len(got.Samples) != c.held || got.Dropped != int64(c.dropped) {
			t.Errorf("Since(%d): %d held, %d dropped; want %d, %d", c.since, len(got.Samples), got.Dropped, c.held, c.dropped)
		}
	}
}

// TestStoreDropRunsBounded drops more samples, each at its own time, than
// the runs that record them: a query over all of them counts every one,
// and one over the recent ones counts them exactly.
func TestStoreDropRunsBounded(t *testing.T) {
	c := &stepClock{}
	s := NewStore(Options{PerHash: 1, Now: c.now})
	n := maxRunsPerHash + 500
	for range n + 1 {
		if err := s.Add(outcome(hashA, 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Since(0)[hashA].Dropped; got != int64(n) {
		t.Errorf("dropped since the start: %d, want %d", got, n)
	}
	// The last dropped was reported at 999+n; the last 10 of them since
	// 999+n-9.
	if got := s.Since(int64(999 + n - 9))[hashA].Dropped; got != 10 {
		t.Errorf("dropped in the last 10 ms: %d, want 10", got)
	}
	if r := s.rings[hashA]; len(r.dropped) > maxRunsPerHash || cap(r.dropped) > 2*maxRunsPerHash+1 {
		t.Errorf("drop record of %d runs (capacity %d), over its bound %d", len(r.dropped), cap(r.dropped), maxRunsPerHash)
	}
}

// TestStoreForgetsLeastRecentHash holds two hashes at most: a third
// forgets the one reported least recently, and its series.
func TestStoreForgetsLeastRecentHash(t *testing.T) {
	c := &stepClock{}
	reg := prometheus.NewRegistry()
	s := NewStore(Options{MaxHashes: 2, Now: c.now, Metrics: NewMetrics(reg)})
	for _, h := range []string{hashA, hashB, hashA, hashC} {
		if err := s.Add(outcome(h, 100, 40)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{hashA, hashC}, s.Hashes()); diff != "" {
		t.Errorf("hashes held (-want +got):\n%s", diff)
	}
	want := `
# HELP kvhint_outcome_cached_tokens_total Prompt tokens the engines served from their prefix caches, of the reported requests, by role and the config that booked them.
# TYPE kvhint_outcome_cached_tokens_total counter
kvhint_outcome_cached_tokens_total{config_hash="aaaaaaaaaaaaaaaa",role="decode"} 80
kvhint_outcome_cached_tokens_total{config_hash="cccccccccccccccc",role="decode"} 40
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvhint_outcome_cached_tokens_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.opts.Metrics.ttft); n != 2 {
		t.Errorf("%d TTFT series, want 2 (one per hash held)", n)
	}
}

func TestStoreRefuses(t *testing.T) {
	s := NewStore(Options{})
	for _, c := range []struct {
		o    bookingapi.Outcome
		want string
	}{
		{bookingapi.Outcome{ConfigHash: hashA, PromptTokens: 1}, "role is required"},
		{bookingapi.Outcome{Role: "decode", ConfigHash: "ABC", PromptTokens: 1}, `config_hash "ABC" is not a config hash`},
		{bookingapi.Outcome{Role: "decode", ConfigHash: hashA, PromptTokens: 10, CachedTokens: 11}, "cached_tokens 11 is not within 0 and prompt_tokens (10)"},
		{bookingapi.Outcome{Role: "decode", ConfigHash: hashA, PromptTokens: -1}, "prompt_tokens -1 is not within 0 and 16777216"},
		{bookingapi.Outcome{Role: "decode", ConfigHash: hashA, TTFTSeconds: -1}, "ttft_seconds -1 is not within 0 and a day"},
		{bookingapi.Outcome{Role: "decode", ConfigHash: hashA, SessionID: strings.Repeat("s", bookingapi.MaxSessionIDBytes+1)}, "session_id is 257 bytes, over 256"},
	} {
		err := s.Add(&c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%+v): error %v, want one saying %q", c.o, err, c.want)
		}
	}
	if h := s.Hashes(); len(h) != 0 {
		t.Errorf("refused outcomes were kept under %v", h)
	}
	for i := range MaxRolesPerHash {
		if err := s.Add(&bookingapi.Outcome{Role: fmt.Sprint("r", i), ConfigHash: hashA}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Add(&bookingapi.Outcome{Role: "one-more", ConfigHash: hashA}); !errors.Is(err, ErrTooManyRoles) {
		t.Errorf("role %d of a hash: error %v, want ErrTooManyRoles", MaxRolesPerHash+1, err)
	}
}

type shadowCounts map[string]*rolloutapi.ShadowCounts

func (s shadowCounts) Shadow() map[string]*rolloutapi.ShadowCounts { return s }

// TestHandler reads the outcomes over real HTTP on loopback.
func TestHandler(t *testing.T) {
	c := &stepClock{}
	s := NewStore(Options{Now: c.now})
	for range 3 {
		if err := s.Add(outcome(hashA, 64, 32)); err != nil {
			t.Fatal(err)
		}
	}
	shadow := shadowCounts{hashB: {Bookings: 5, Differ: 2, ByAction: map[string]int64{"kv.fetch": 2}}}
	srv := httptest.NewServer(Handler(s, "router-0", shadow))
	defer srv.Close()

	resp, err := http.Get(srv.URL + rolloutapi.OutcomesPath + "?since=1001")
	if err != nil {
		t.Fatal(err)
	}
	var got rolloutapi.Outcomes
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := rolloutapi.Outcomes{Pod: "router-0", Configs: s.Since(1001), Shadow: shadow}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if n := len(got.Configs[hashA].Samples); n != 2 {
		t.Errorf("%d samples since 1001, want 2", n)
	}

	resp, err = http.Get(srv.URL + rolloutapi.OutcomesPath + "?since=yesterday")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `since=\"yesterday\": want Unix milliseconds`) {
		t.Errorf("since=yesterday: %s %s, want 400 naming the parameter", resp.Status, body)
	}
}

// TestStoreAnswerBound fills more hashes than an answer holds: the hashes
// reported most recently come first, each with its newest samples, and
// what is left out is counted as dropped.
func TestStoreAnswerBound(t *testing.T) {
	c := &stepClock{}
	s := NewStore(Options{PerHash: 4, Now: c.now})
	// A, B and C four samples each, in that order; the answer holds 8.
	for _, h := range []string{hashA, hashB, hashC} {
		for range 4 {
			if err := s.Add(outcome(h, 10, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := s.Since(0)
	for h, want := range map[string][2]int{hashC: {4, 0}, hashB: {4, 0}, hashA: {0, 4}} {
		if co := got[h]; co == nil || len(co.Samples) != want[0] || co.Dropped != int64(want[1]) {
			t.Errorf("%s: %+v, want %d samples and %d dropped", h, co, want[0], want[1])
		}
	}
	// Since 1002: A's last two, B's and C's four: 10, past 8 by A's 2.
	if co := s.Since(1002)[hashA]; co == nil || len(co.Samples) != 0 || co.Dropped != 2 {
		t.Errorf("Since(1002) of %s: %+v, want its 2 samples counted as dropped", hashA, co)
	}
}

// TestAnswerBytes fills a store of the default bounds with outcomes of
// the longest fields it takes, and encodes the answer: it stays within
// MaxAnswerBytes.
func TestAnswerBytes(t *testing.T) {
	s := NewStore(Options{})
	for _, h := range []string{hashA, hashB, hashC, "dddddddddddddddd"} {
		o := &bookingapi.Outcome{Role: strings.Repeat("r", MaxRoleBytes), SessionID: "s", ConfigHash: h, PromptTokens: MaxPromptTokens,
			CachedTokens: MaxPromptTokens - 1, TTFTSeconds: 86399.999999, Error: "x", HintRejected: true}
		for i := range DefaultPerHash {
			// The session key is kept, not the ID: look for an ID whose
			// key has 20 digits, the longest in JSON.
			for o.SessionID = fmt.Sprint("s", i); rolloutapi.SessionKey(o.SessionID) < 1e19; o.SessionID += "x" {
			}
			if err := s.Add(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := json.Marshal(rolloutapi.Outcomes{Pod: strings.Repeat("p", 253), Configs: s.Since(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxAnswerBytes {
		t.Errorf("the answer is %d bytes, over %d", len(b), MaxAnswerBytes)
	}
	t.Logf("the largest answer: %d bytes", len(b))
}
