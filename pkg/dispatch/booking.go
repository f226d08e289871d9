package dispatch

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

// MaxRequestIDBytes caps a booking's request ID, which becomes the hint's
// message ID.
const MaxRequestIDBytes = 256

// DefaultMaxBookingBytes is the default booking size limit
// (Options.MaxBookingBytes, the sidecar's --max-booking-bytes): the most
// bytes a booking's committed copy may take in the decimal JSON of a
// kv.fetch payload, and the most a booking request body may take. 1 MiB
// holds about 49,000 random 64-bit block hashes: a 1M-token prompt at block
// size 32 is 32,768.
const DefaultMaxBookingBytes = 1 << 20

// MaxSourceEndpointBytes caps a source control endpoint, whether a booking
// gives it or a worker advertises it.
const MaxSourceEndpointBytes = 512

// Errors a booking can fail with. Callers branch on them with errors.Is; the
// wrapped message says what to fix.
var (
	// ErrNotReady: no valid hints config has loaded yet.
	ErrNotReady = errors.New("no hints config loaded yet")
	// ErrUnknownRole: the role is not in the config in force.
	ErrUnknownRole = errors.New("unknown role")
	// ErrInvalidBooking: a required field is missing or out of range.
	ErrInvalidBooking = errors.New("invalid booking")
	// ErrBookingTooLarge: the committed copy is too large to carry in a
	// payload under the dispatcher's booking limit. It wraps
	// ErrInvalidBooking; the sidecar answers it with 413.
	ErrBookingTooLarge = fmt.Errorf("%w: too large", ErrInvalidBooking)
)

// Booking is what a router tells the dispatcher after it booked a worker:
// the booking API's type (pkg/bookingapi), so that a booking a router sends
// the sidecar and one it hands an in-process dispatcher are the same value.
type Booking = bookingapi.Booking

// validateBooking checks what the dispatcher relies on. It allocates only when it
// fails.
func validateBooking(b *Booking) error {
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
	case b.Session.ID != "" && b.Session.Turn < 1:
		return fmt.Errorf("%w: session.turn is %d; turns count from 1", ErrInvalidBooking, b.Session.Turn)
	case b.KVCopy != nil && len(b.KVCopy.BlockHashes) == 0:
		return fmt.Errorf("%w: committed_kv_copy.block_hashes is empty; omit committed_kv_copy when nothing is copied", ErrInvalidBooking)
	case b.KVCopy != nil && b.KVCopy.SourceRank < 0:
		return fmt.Errorf("%w: committed_kv_copy.source_rank is %d; ranks count from 0", ErrInvalidBooking, b.KVCopy.SourceRank)
	case b.KVCopy != nil && len(b.KVCopy.SourceEndpoint) > MaxSourceEndpointBytes:
		return fmt.Errorf("%w: committed_kv_copy.source_endpoint is %d bytes, over the %d allowed", ErrInvalidBooking, len(b.KVCopy.SourceEndpoint), MaxSourceEndpointBytes)
	}
	return nil
}

// copyFits reports whether booking b's committed copy, written as a
// kv.fetch payload's block hashes in decimal, takes at most limit bytes,
// and if not an error that names the limit. It reads the hashes only when
// the bound of 21 bytes per hash does not settle it.
func copyFits(b *Booking, limit int) error {
	c := b.KVCopy
	if c == nil || 21*len(c.BlockHashes)+len(c.SourceEndpoint) <= limit {
		return nil
	}
	n := len(c.SourceEndpoint)
	for _, h := range c.BlockHashes {
		n += decimalLen(h) + 1
	}
	if n <= limit {
		return nil
	}
	return fmt.Errorf("%w: committed_kv_copy's %d block hashes take %d bytes in decimal, over the booking limit of %d bytes "+
		"(dispatch.Options.MaxBookingBytes; the sidecar's --max-booking-bytes)", ErrBookingTooLarge, len(c.BlockHashes), n, limit)
}

func decimalLen(v uint64) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

// RecordInvalidBooking counts a booking refused before it reached the
// dispatcher, such as a request body that does not decode, under the
// invalid reason of the booking errors.
func (d *Dispatcher) RecordInvalidBooking() { d.refusals.errInvalid.Inc() }

// RecordTooLargeBooking counts a booking refused before it reached the
// dispatcher because its request body is over the booking limit, under
// the too_large reason of the booking errors.
func (d *Dispatcher) RecordTooLargeBooking() { d.refusals.errTooLarge.Inc() }

// Outcome says what became of a booking that was accepted. Its zero value,
// OutcomeNone, is what a Hint holds when Book or Build returns an error:
// nothing happened.
type Outcome int

const (
	// OutcomeNone: the booking was refused (Book returned an error), so
	// nothing was built or sent. It is never the outcome of an accepted
	// booking.
	OutcomeNone Outcome = iota
	// OutcomeHinted: a hint was built and handed to delivery.
	OutcomeHinted
	// OutcomeNoActions: the role's policies kept no action, so no message.
	OutcomeNoActions
	// OutcomeNotHintCapable: the worker does not advertise router_hint; the
	// policies did not run.
	OutcomeNotHintCapable
	// OutcomeUnknownWorker: the worker is not in the registry (not yet
	// seen, or gone); the policies did not run.
	OutcomeUnknownWorker
	// OutcomeNotInPool: the worker is registered but outside the role's
	// worker pool (the workers its RouterRole's workerSelector picks); the
	// policies did not run.
	OutcomeNotInPool
)

// String is the outcome as the API and the metrics spell it.
func (o Outcome) String() string {
	switch o {
	case OutcomeNone:
		return "none"
	case OutcomeHinted:
		return outcomeHinted
	case OutcomeNoActions:
		return outcomeNoActions
	case OutcomeNotHintCapable:
		return outcomeNotCapable
	case OutcomeUnknownWorker:
		return outcomeUnknownWorker
	case OutcomeNotInPool:
		return outcomeNotInPool
	}
	return "unknown"
}

// CopyDrop says why a booking's committed copy was dropped before the
// policies ran: only the copy (the kv.fetch) is lost, the other policies
// run. The values are the reason label of kv_copies_dropped_total.
type CopyDrop int

const (
	// CopyKept: the copy was not dropped (or there was none).
	CopyKept CopyDrop = iota
	// CopyDropUnknownSource: the copy names a source worker but no
	// endpoint, and the source is not registered.
	CopyDropUnknownSource
	// CopyDropUnknownSourceRank: the source is registered but advertises
	// no control endpoint for the copy's rank.
	CopyDropUnknownSourceRank
	// CopyDropOutsideDomain: the booked worker requires its KV transfers
	// to stay in its topology domain (TopologyWorker), and the copy's
	// source is in another domain, or in none the registry knows.
	CopyDropOutsideDomain
	numCopyDrops
)

var copyDropNames = [numCopyDrops]string{"", "unknown_source", "unknown_source_rank", "outside_domain"}

// String is the metric label value; "" for CopyKept.
func (c CopyDrop) String() string {
	if c < 0 || c >= numCopyDrops {
		return "unknown"
	}
	return copyDropNames[c]
}

// Hint is the result of one booking.
type Hint struct {
	// Outcome says whether a message was built, and if not why.
	Outcome Outcome
	// Message is the encoded hint (docs/design.md, 8a), the exact bytes the router
	// carries on the request it forwards (CarryHint) and, for a worker
	// that advertises a hint endpoint, that delivery posts; nil unless
	// Outcome is OutcomeHinted. The caller owns it but must not modify it:
	// delivery posts the same bytes.
	Message []byte
	// Actions is the number of actions in Message.
	Actions int
	// Queued reports whether delivery accepted the message. It is false
	// when the worker's queue was full or the worker has no hint endpoint.
	Queued bool
	// ConfigHash is the hash of the config snapshot the booking ran on.
	ConfigHash string
	// CopyDrop says why the committed copy was dropped, if it was.
	CopyDrop CopyDrop
}
