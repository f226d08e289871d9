package compiled

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// TestStagedRoundTrip: a stable and a candidate config written with
// StagedData split back into the same two, the stage with them, and the
// stable config's hash is the one it had alone.
func TestStagedRoundTrip(t *testing.T) {
	stable := map[string]string{RolesKey: "decode:\n  routerMode: kv\n", PolicyKey: "worker_selection:\n  decode: kvcr\n"}
	cand := map[string]string{RolesKey: "decode:\n  routerMode: kv\n", PolicyKey: "worker_selection:\n  decode: kvcr\nkv_hint_policy:\n  decode: [kv-fetch]\n"}
	st := rolloutapi.Stage{Candidate: Hash(cand), Stage: rolloutapi.StageCanary, Weight: 10}
	data, err := StagedData(stable, cand, st)
	if err != nil {
		t.Fatal(err)
	}
	if Hash(data) != Hash(stable) {
		t.Errorf("the staged data hashes to %s, the stable config alone to %s: the candidate must not change the stable hash", Hash(data), Hash(stable))
	}
	s, err := Split(data)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(s.Stable, stable) || !maps.Equal(s.Candidate, cand) || s.Stage == nil || *s.Stage != st {
		t.Errorf("split = %+v, want stable %v, candidate %v, stage %+v", s, stable, cand, st)
	}
	if _, err := StagedData(stable, cand, rolloutapi.Stage{Candidate: Hash(stable), Stage: rolloutapi.StageShadow}); err == nil {
		t.Error("StagedData took a stage naming another candidate")
	}
}

// TestSplitRefusesABadStage: a stage that does not parse, is out of range
// or names another candidate is refused with what is wrong, and the
// stable config is still returned whole.
func TestSplitRefusesABadStage(t *testing.T) {
	stable := map[string]string{RolesKey: "{}\n"}
	cand := map[string]string{RolesKey: "decode:\n  routerMode: kv\n", PolicyKey: "worker_selection:\n  decode: kvcr\n"}
	good := Hash(cand)
	for _, tc := range []struct{ name, stage, want string }{
		{"not JSON", "{", "rollout.json"},
		{"unknown field", `{"candidate":"` + good + `","stage":"shadow","steps":3}`, `unknown field "steps"`},
		{"bad stage", `{"candidate":"` + good + `","stage":"blue"}`, `stage "blue" is not one of shadow, canary`},
		{"weight in shadow", `{"candidate":"` + good + `","stage":"shadow","weight":5}`, "weight 5"},
		{"weight out of range", `{"candidate":"` + good + `","stage":"canary","weight":101}`, "weight 101"},
		{"not a hash", `{"candidate":"XYZ","stage":"shadow"}`, `candidate "XYZ" is not a config hash`},
		{"another candidate", `{"candidate":"0123456789abcdef","stage":"shadow"}`, "names candidate 0123456789abcdef but the candidate. keys hash to " + good},
		{"too large", strings.Repeat(" ", rolloutapi.MaxStageBytes+1), "over the 1024-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := maps.Clone(stable)
			for k, v := range cand {
				data[CandidatePrefix+k] = v
			}
			data[StageKey] = tc.stage
			s, err := Split(data)
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Split = %v, want a malformed-config error containing %q", err, tc.want)
			}
			if !maps.Equal(s.Stable, stable) || s.Candidate != nil || s.Stage != nil {
				t.Errorf("split of a bad stage = %+v, want the stable config alone", s)
			}
		})
	}
}

// TestSplitWithoutStage: candidate keys with no stage are no rollout.
func TestSplitWithoutStage(t *testing.T) {
	s, err := Split(map[string]string{RolesKey: "{}\n", CandidatePrefix + RolesKey: "{}\n"})
	if err != nil || s.Stage != nil || s.Candidate != nil || len(s.Stable) != 1 {
		t.Errorf("Split = %+v, %v; want the stable config alone", s, err)
	}
}
