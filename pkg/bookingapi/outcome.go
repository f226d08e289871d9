package bookingapi

// OutcomesPath is the outcome route of the sidecar's booking listener.
const OutcomesPath = "/v1/outcomes"

// HeaderConfigHash, on a booking answer (200 and 204), is the hash of the
// config that booked it; a router echoes it in the request's Outcome.
const HeaderConfigHash = "Kvhint-Config-Hash"

// MaxOutcomeBytes caps the body of POST /v1/outcomes: an outcome is a few
// short fields.
const MaxOutcomeBytes = 4 << 10

// MaxSessionIDBytes caps an Outcome's SessionID, as the sidecar caps a
// booking's request ID.
const MaxSessionIDBytes = 256

// Outcome is what became of one booked request, as the router saw it: the
// body of POST /v1/outcomes. The sidecar keeps it by ConfigHash for a
// staged rollout's analysis, which compares a candidate config's requests
// with the stable config's. The sidecar requires role, config_hash (16
// lower-case hex digits) and prompt_tokens; cached_tokens may not exceed
// prompt_tokens.
type Outcome struct {
	// RequestID identifies the request, as in its Booking.
	RequestID string `json:"request_id,omitempty"`
	// Role is the role the request was booked for.
	Role string `json:"role"`
	// SessionID is the request's session, as in its Booking's
	// session.id; empty outside one. A staged rollout books whole
	// sessions with one config, so its analysis compares sessions, not
	// requests: the sidecar keeps a 64-bit hash of it (at most
	// MaxSessionIDBytes), and counts an outcome without one as a session
	// of its own.
	SessionID string `json:"session_id,omitempty"`
	// Worker is the worker that served it.
	Worker string `json:"worker,omitempty"`
	// ConfigHash is the booking answer's Kvhint-Config-Hash: the config
	// that booked the request.
	ConfigHash string `json:"config_hash"`
	// PromptTokens is the prompt's length in tokens, and CachedTokens the
	// part the engine served from its prefix cache (its OpenAI answer's
	// usage.prompt_tokens_details.cached_tokens).
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// TTFTSeconds is the time to the first token as the router measured
	// it; 0 when the request failed before one.
	TTFTSeconds float64 `json:"ttft_seconds,omitempty"`
	// Error says why the request failed; empty when it did not.
	Error string `json:"error,omitempty"`
	// HintRejected is set when the worker refused the request's hint.
	HintRejected bool `json:"hint_rejected,omitempty"`
}

// Answer is a sidecar's answer to a booking.
type Answer struct {
	// Message is the hint to carry to the booked worker, or nil when the
	// booking has none.
	Message []byte
	// ConfigHash is the hash of the config that booked it (the answer's
	// Kvhint-Config-Hash), for the request's Outcome.
	ConfigHash string
}
