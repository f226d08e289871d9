package hintstest

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

// Booking is one booking as a hint policy sees it: the booking API's type
// (pkg/bookingapi), whose fields the dispatcher copies into the
// HintContext it hands every policy of the booked role. A policy sees
// KVCopy only when it declared hints.KVCopy.
type Booking = bookingapi.Booking

// NewContext returns the HintContext the dispatcher would hand a policy
// whose provider declared commitments, for booking b. The context lends no
// payload arena: PayloadWriter allocates, which a policy cannot tell apart.
func NewContext(b Booking, commitments hints.Commitments) *hints.HintContext {
	hc := &hints.HintContext{
		RequestID:    b.RequestID,
		Role:         b.Role,
		Worker:       b.Worker,
		PromptTokens: b.PromptTokens,
		BlockSize:    b.BlockSize,
		Session:      b.Session,
	}
	host := hostbridge.Of[hints.HintContext, hints.CommittedCopy, hints.Action](hc)
	host.KVCopy = b.KVCopy
	host.Granted = uint8(commitments)
	return hc
}

// BuildHints runs policy once on booking b as the dispatcher does for a
// policy whose provider declared commitments, and returns what it built.
func BuildHints(ctx context.Context, policy hints.HintPolicy, commitments hints.Commitments, b Booking) ([]hints.Action, error) {
	return policy.BuildHints(ctx, NewContext(b, commitments))
}
