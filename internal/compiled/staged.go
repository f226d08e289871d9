package compiled

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// The keys a compiled ConfigMap carries while a staged rollout runs. The
// stable config keeps its keys (PolicyKey, RolesKey, FormKey) and its
// HashAnnotation; the candidate's keys are the same names behind
// CandidatePrefix, and StageKey says what the router pods do with it. A
// router that knows nothing of rollouts (Dynamo's own, reading PolicyKey)
// runs the stable config, as before.
const (
	// CandidatePrefix is put before each of the candidate config's keys.
	CandidatePrefix = "candidate."
	// StageKey holds the rollout's stage as JSON (rolloutapi.Stage).
	StageKey = "rollout.json"
	// CandidateHashAnnotation is the content hash of the candidate's
	// keys, as Hash computes it over them without their prefix.
	CandidateHashAnnotation = "hints.kvrouter.io/candidate-hash"
)

// StagedData returns the data of a ConfigMap that runs stable and stages
// candidate (both as Config.Data returns them) as st says. st.Candidate
// must be candidate's hash.
func StagedData(stable, candidate map[string]string, st rolloutapi.Stage) (map[string]string, error) {
	if err := st.Validate(); err != nil {
		return nil, err
	}
	if h := Hash(candidate); h != st.Candidate {
		return nil, fmt.Errorf("stage names candidate %s but the candidate's data hashes to %s", st.Candidate, h)
	}
	out := maps.Clone(stable)
	for k, v := range candidate {
		out[CandidatePrefix+k] = v
	}
	js, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	out[StageKey] = string(js)
	return out, nil
}

// Staged is a compiled ConfigMap's data split into the stable config and,
// while a rollout runs, the candidate and its stage.
type Staged struct {
	// Stable holds the stable config's keys (the data Decode reads).
	Stable map[string]string
	// Candidate holds the candidate's keys without their prefix; nil when
	// no rollout runs.
	Candidate map[string]string
	// Stage is the rollout's stage; nil when no rollout runs.
	Stage *rolloutapi.Stage
}

// Split separates a compiled ConfigMap's data. Candidate keys without a
// stage are ignored (no rollout runs); a stage that does not parse, or
// that names a candidate other than the one the keys hold, is an error
// of the rollout only: Stable is set whatever Split returns, so a router
// keeps running the stable config.
func Split(data map[string]string) (Staged, error) {
	s := Staged{Stable: map[string]string{}}
	cand := map[string]string{}
	for k, v := range data {
		switch {
		case k == StageKey:
		case strings.HasPrefix(k, CandidatePrefix):
			cand[strings.TrimPrefix(k, CandidatePrefix)] = v
		default:
			s.Stable[k] = v
		}
	}
	raw, ok := data[StageKey]
	if !ok {
		return s, nil
	}
	var st rolloutapi.Stage
	if len(raw) > rolloutapi.MaxStageBytes {
		return s, fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", ErrMalformed, StageKey, len(raw), rolloutapi.MaxStageBytes)
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return s, fmt.Errorf("%w: %s: %v", ErrMalformed, StageKey, err)
	}
	if err := st.Validate(); err != nil {
		return s, fmt.Errorf("%w: %s: %v", ErrMalformed, StageKey, err)
	}
	if h := Hash(cand); h != st.Candidate {
		return s, fmt.Errorf("%w: %s names candidate %s but the %s keys hash to %s", ErrMalformed, StageKey, st.Candidate, CandidatePrefix, h)
	}
	s.Candidate, s.Stage = cand, &st
	return s, nil
}
