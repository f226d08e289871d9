package router

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// MaxRequestIDBytes caps a booking's request ID, which becomes the hint's
// message ID.
const MaxRequestIDBytes = 256

// Errors a booking can fail with. Callers branch on them with errors.Is; the
// wrapped message says what to fix.
var (
	// ErrNotReady: no valid hints config has loaded yet.
	ErrNotReady = errors.New("no hints config loaded yet")
	// ErrUnknownRole: the role is not in the config in force.
	ErrUnknownRole = errors.New("unknown role")
	// ErrInvalidBooking: a required field is missing or out of range.
	ErrInvalidBooking = errors.New("invalid booking")
)

// Booking is what a router tells the sidecar after it booked a worker.
type Booking struct {
	// RequestID identifies the request; it becomes the hint's message ID.
	RequestID string
	// Role is the stage the worker was booked for.
	Role string
	// Worker is the booked worker's ID (its pod name in Kubernetes).
	Worker string
	// PromptTokens is the prompt length in tokens.
	PromptTokens int
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// Session is the request's session; Session.ID is empty outside one.
	Session hints.Session
	// KVCopy is the worker-selection policy's committed KV copy, or nil.
	KVCopy *hints.CommittedCopy
}

// validate checks what the dispatcher relies on. It allocates only when it
// fails.
func (b *Booking) validate() error {
	switch {
	case b.RequestID == "":
		return fmt.Errorf("%w: request_id is required", ErrInvalidBooking)
	case len(b.RequestID) > MaxRequestIDBytes:
		return fmt.Errorf("%w: request_id is %d bytes, over the %d allowed", ErrInvalidBooking, len(b.RequestID), MaxRequestIDBytes)
	case b.Role == "":
		return fmt.Errorf("%w: role is required", ErrInvalidBooking)
	case b.Worker == "":
		return fmt.Errorf("%w: worker is required", ErrInvalidBooking)
	case b.PromptTokens < 0:
		return fmt.Errorf("%w: prompt_tokens is %d; it must be 0 or more", ErrInvalidBooking, b.PromptTokens)
	case b.BlockSize < 0:
		return fmt.Errorf("%w: block_size is %d; it must be 0 or more", ErrInvalidBooking, b.BlockSize)
	case b.Session.ID == "" && (b.Session.Turn != 0 || b.Session.Final):
		return fmt.Errorf("%w: session.id is required when session.turn or session.final is set", ErrInvalidBooking)
	case b.Session.Turn < 0:
		return fmt.Errorf("%w: session.turn is %d; turns count from 1", ErrInvalidBooking, b.Session.Turn)
	}
	return nil
}

// RecordInvalidBooking counts a booking refused before it reached the
// dispatcher, such as a request body that does not decode, under the
// invalid reason of the booking errors.
func (d *Dispatcher) RecordInvalidBooking() { d.metrics.errInvalid.Inc() }

// Outcome says what became of a booking that was accepted.
type Outcome int

const (
	// OutcomeHinted: a hint was built and handed to delivery.
	OutcomeHinted Outcome = iota
	// OutcomeNoActions: the role's policies kept no action, so no message.
	OutcomeNoActions
	// OutcomeNotHintCapable: the worker does not advertise router_hint; the
	// policies did not run.
	OutcomeNotHintCapable
	// OutcomeUnknownWorker: the worker is not in the registry (not yet
	// seen, or gone); the policies did not run.
	OutcomeUnknownWorker
)

// String is the outcome as the API and the metrics spell it.
func (o Outcome) String() string {
	switch o {
	case OutcomeHinted:
		return outcomeHinted
	case OutcomeNoActions:
		return outcomeNoActions
	case OutcomeNotHintCapable:
		return outcomeNotCapable
	case OutcomeUnknownWorker:
		return outcomeUnknownWorker
	}
	return "unknown"
}

// Hint is the result of one booking.
type Hint struct {
	// Outcome says whether a message was built, and if not why.
	Outcome Outcome
	// Message is the encoded hint, the exact bytes posted to the worker
	// (DESIGN 8a); nil unless Outcome is OutcomeHinted. The caller owns it
	// but must not modify it: delivery posts the same bytes.
	Message []byte
	// Actions is the number of actions in Message.
	Actions int
	// Queued reports whether delivery accepted the message. It is false
	// when the worker's queue was full or the worker has no hint endpoint.
	Queued bool
	// ConfigHash is the hash of the config snapshot the booking ran on.
	ConfigHash string
}
