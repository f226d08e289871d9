// Package bookingapi is the kvhint sidecar's booking API as a router sees
// it: Booking, the JSON body of POST /v1/bookings, declared once for the
// sidecar that reads it, the routers that send it and the in-process
// dispatcher that books it (pkg/dispatch.Booking is this type), and Client,
// which posts one to a sidecar and returns the hint it answers; Outcome,
// the body of POST /v1/outcomes, what became of a booked request, which
// Client reports to the sidecar for a staged rollout's analysis.
//
// It imports the plugin contract (pkg/hints, for the session and the
// committed copy) and the standard library: a router that books over HTTP
// needs nothing of the dispatcher.
//
// Experimental until v1: see CHANGELOG.md at the repository root.
package bookingapi

import "github.com/kvrouter/kv-hint-operator/pkg/hints"

// Path is the booking route of the sidecar's booking listener.
const Path = "/v1/bookings"

// Booking is what a router tells the sidecar after it booked a worker: the
// body of POST /v1/bookings, and what a Go router hands an in-process
// dispatcher (pkg/dispatch). The sidecar requires request_id, role, worker,
// prompt_tokens and block_size; session and committed_kv_copy are left out
// when there is none.
type Booking struct {
	// RequestID identifies the request; it becomes the hint's message ID.
	RequestID string `json:"request_id"`
	// Role is the stage the worker was booked for.
	Role string `json:"role"`
	// Worker is the booked worker's ID (its pod name in Kubernetes).
	Worker string `json:"worker"`
	// PromptTokens is the prompt length in tokens.
	PromptTokens int `json:"prompt_tokens"`
	// BlockSize is the number of tokens per KV block; 0 when the caller
	// does not know it (the HTTP API requires it, and refuses 0 as it
	// refuses a missing one).
	BlockSize int `json:"block_size"`
	// Session is the request's session; Session.ID is empty outside one,
	// and Session.Turn counts from 1 within one (0 is refused).
	Session hints.Session `json:"session,omitzero"`
	// KVCopy is the worker-selection policy's committed KV copy, or nil;
	// a copy with no block hashes is refused (leave KVCopy nil instead).
	KVCopy *hints.CommittedCopy `json:"committed_kv_copy,omitempty"`
}
