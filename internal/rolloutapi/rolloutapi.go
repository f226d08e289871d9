// Package rolloutapi is what the manager and the router sidecars say to
// each other while a staged rollout runs, declared once for both sides:
// the stage the manager puts in a router's compiled ConfigMap (Stage), the
// config status each sidecar reports on its own Pod (ConfigStatus), and
// the request outcomes a sidecar serves, by config hash, for the manager's
// analysis (Outcomes).
//
// It imports the standard library only.
package rolloutapi

import (
	"errors"
	"fmt"
	"regexp"
)

// StageName is what router pods do with a rollout's candidate config.
type StageName string

const (
	// StageShadow runs the candidate beside the stable config on every
	// booking and sends only the stable config's hints; the sidecar counts
	// the bookings whose hints would differ.
	StageShadow StageName = "shadow"
	// StageCanary books Weight percent of sessions (hashed on the session,
	// else the request) with the candidate, inside every pod, so baseline
	// and canary share pods, workers and cache age.
	StageCanary StageName = "canary"
)

// MaxStageBytes caps the stage a sidecar reads.
const MaxStageBytes = 1 << 10

// hashPattern is the form of a compiled config's content hash.
var hashPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// ValidHash reports whether s has the form of a compiled config's hash.
func ValidHash(s string) bool { return hashPattern.MatchString(s) }

// Stage is a router's rollout stage: the candidate's content hash, the
// stage and, in a canary stage, the share of sessions it books.
type Stage struct {
	// Candidate is the candidate config's content hash.
	Candidate string `json:"candidate"`
	// Stage is shadow or canary.
	Stage StageName `json:"stage"`
	// Weight is the percent of sessions the candidate books in a canary
	// stage, 1 to 100; 0 in a shadow stage.
	Weight int `json:"weight,omitempty"`
}

// Validate checks a stage's fields.
func (s Stage) Validate() error {
	var errs []error
	if !ValidHash(s.Candidate) {
		errs = append(errs, fmt.Errorf("candidate %q is not a config hash (16 lower-case hex digits)", s.Candidate))
	}
	switch s.Stage {
	case StageShadow:
		if s.Weight != 0 {
			errs = append(errs, fmt.Errorf("weight %d: a shadow stage books no session with the candidate", s.Weight))
		}
	case StageCanary:
		if s.Weight < 1 || s.Weight > 100 {
			errs = append(errs, fmt.Errorf("weight %d: a canary stage books 1 to 100 percent of sessions", s.Weight))
		}
	default:
		errs = append(errs, fmt.Errorf("stage %q is not one of %s, %s", s.Stage, StageShadow, StageCanary))
	}
	return errors.Join(errs...)
}

// ConfigStatusAnnotation is set by the sidecar on its own Pod to its
// ConfigStatus as JSON, on every change of it.
const ConfigStatusAnnotation = "hints.kvrouter.io/config-status"

// MaxConfigStatusBytes caps the annotation the manager reads; errors are
// cut to fit.
const MaxConfigStatusBytes = 4 << 10

// ConfigStatus is what one router pod's sidecar runs, in the shape of the
// kubelet's dynamic config status: the config its ConfigMap assigns, the
// one in force, the last one that loaded, and why the assigned one is not
// in force. A sidecar that refuses a config stays on its last good one
// and says why.
type ConfigStatus struct {
	// Assigned is the hash of the stable config the ConfigMap holds.
	Assigned string `json:"assigned,omitempty"`
	// Active is the hash of the config in force; empty before the first
	// loads.
	Active string `json:"active,omitempty"`
	// LastKnownGood is the hash of the last config that loaded (Active,
	// once one did).
	LastKnownGood string `json:"lastKnownGood,omitempty"`
	// Error says why Assigned is not Active; empty when it is.
	Error string `json:"error,omitempty"`
	// Candidate is the rollout's candidate, while one is staged.
	Candidate *CandidateStatus `json:"candidate,omitempty"`
}

// CandidateStatus is what a sidecar does with a rollout's candidate.
type CandidateStatus struct {
	// Assigned is the candidate hash the ConfigMap's stage names.
	Assigned string `json:"assigned"`
	// Active is the candidate hash loaded beside the stable config; empty
	// while the candidate is refused (Error says why).
	Active string `json:"active,omitempty"`
	// Stage and Weight are those of the ConfigMap's stage in force.
	Stage  StageName `json:"stage,omitempty"`
	Weight int       `json:"weight,omitempty"`
	// Error says why the candidate is refused (the sidecar's NACK).
	Error string `json:"error,omitempty"`
}

// OutcomesPath is the route of the sidecar's ops listener that serves
// Outcomes; the query parameter since (Unix milliseconds) limits the
// samples to those at or after it.
const OutcomesPath = "/v1/rollout/outcomes"

// Outcomes are the request outcomes a sidecar holds, by the hash of the
// config that booked the request, and the shadow comparisons of a staged
// candidate.
type Outcomes struct {
	// Pod is the sidecar's pod name.
	Pod string `json:"pod,omitempty"`
	// Configs are the outcomes by config hash.
	Configs map[string]*ConfigOutcomes `json:"configs"`
	// Shadow are the shadow comparisons by candidate hash, counted since
	// the candidate was loaded.
	Shadow map[string]*ShadowCounts `json:"shadow,omitempty"`
}

// ConfigOutcomes are the outcomes of requests booked with one config.
type ConfigOutcomes struct {
	// Samples are the outcomes held, oldest first.
	Samples []Sample `json:"samples"`
	// Dropped counts outcomes since the query's start that the sidecar no
	// longer holds (its ring of samples wrapped).
	Dropped int64 `json:"dropped,omitempty"`
}

// Sample is the outcome of one request.
type Sample struct {
	// At is when the outcome was reported, in Unix milliseconds.
	At int64 `json:"at"`
	// Role is the role the request was booked for.
	Role string `json:"role,omitempty"`
	// Session is SessionKey of the request's session ID; 0 outside a
	// session (the analysis counts the request as a session of its own).
	Session uint64 `json:"session,omitempty"`
	// Prompt and Cached are the prompt's tokens and those the engine
	// served from its prefix cache (usage.prompt_tokens_details.
	// cached_tokens in its OpenAI answer).
	Prompt int64 `json:"prompt"`
	Cached int64 `json:"cached"`
	// TTFTMicros is the time to the first token, in microseconds; 0 when
	// the request failed before one.
	TTFTMicros int64 `json:"ttftMicros,omitempty"`
	// Error is set when the request failed.
	Error bool `json:"error,omitempty"`
	// HintRejected is set when the worker refused the request's hint.
	HintRejected bool `json:"hintRejected,omitempty"`
}

// ShadowCounts count the bookings a shadow candidate saw.
type ShadowCounts struct {
	// Bookings counts the bookings both configs built a hint for, or
	// tried to.
	Bookings int64 `json:"bookings"`
	// Differ counts those whose hints would change under the candidate.
	Differ int64 `json:"differ"`
	// ByAction counts the differing bookings by action type: an action
	// type counts when the two hints hold a different number of it.
	ByAction map[string]int64 `json:"byAction,omitempty"`
	// ByRole counts the differing bookings by role.
	ByRole map[string]int64 `json:"byRole,omitempty"`
	// CandidateErrors counts bookings the candidate failed that the
	// stable config did not.
	CandidateErrors int64 `json:"candidateErrors,omitempty"`
}

// SessionKey is the bounded key a sidecar keeps for a request's session
// ID: FNV-1a over its bytes, then SplitMix64's finalizer so that IDs that
// differ in their last bytes spread over all 64 bits. It is the same in
// every pod, so the analysis joins a session's outcomes across router
// pods; two sessions share a key with odds of about 2^-64 a pair, and a
// shared key only merges them into one cluster. It is 0 for "" and never
// 0 otherwise.
func SessionKey(id string) uint64 {
	if id == "" {
		return 0
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return max(h, 1)
}
