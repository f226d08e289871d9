// Package hostbridge gives the host side of the plugin contract (the
// dispatcher in pkg/dispatch and the conformance kit in pkg/hints/hintstest)
// the parts of a hints.HintContext that plugins must not reach: the
// committed KV copy, the commitments granted to the running policy and the
// payload and action memory lent for the booking. Package hints registers the accessor
// at init; being internal to pkg/, nothing outside the SDK can import it.
package hostbridge

// State is the host-only part of a hints.HintContext. C is
// hints.CommittedCopy and A hints.Action; the parameters only break the
// import cycle.
type State[C, A any] struct {
	// KVCopy is the booking's committed KV copy, or nil.
	KVCopy *C
	// Granted is the hints.Commitments of the policy running now.
	Granted uint8
	// Arena is payload memory lent by the dispatcher; its length is what
	// payloads have taken.
	Arena []byte
	// Actions is action memory lent by the dispatcher; its length is what
	// the policies have taken.
	Actions []A
	// Denied is set when a policy asked for the committed copy without
	// having declared KVCopy; the conformance kit reports it.
	Denied bool
}

var stateOf any

// Register installs the accessor; package hints calls it at init.
func Register[H, C, A any](f func(*H) *State[C, A]) { stateOf = f }

// Of returns the host state of hc, a *hints.HintContext.
func Of[H, C, A any](hc *H) *State[C, A] { return stateOf.(func(*H) *State[C, A])(hc) }
