package hints

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

// HintPolicy builds engine-directed KV actions for the worker a router booked.
// BuildHints is called once per booking, on the booking path: it must be fast,
// must not block, and must not keep hc or the slices it reaches after it
// returns. It never changes which worker was chosen.
//
// A policy is built once by its provider's Parse and then shared by every
// booking, concurrently: it must be safe for concurrent use.
type HintPolicy interface {
	BuildHints(ctx context.Context, hc *HintContext) ([]Action, error)
}

// HintPolicyFunc adapts a function to HintPolicy.
type HintPolicyFunc func(ctx context.Context, hc *HintContext) ([]Action, error)

// BuildHints calls f.
func (f HintPolicyFunc) BuildHints(ctx context.Context, hc *HintContext) ([]Action, error) {
	return f(ctx, hc)
}

// Commitments is the set of selection decisions a hint policy consumes. A
// policy sees a committed decision only if its provider declares it.
type Commitments uint8

const (
	// KVCopy: the policy sends the committed KV copy of the booking (the
	// blocks the booked worker should pull from a peer). A role whose
	// selection commits copies needs exactly one such policy.
	KVCopy Commitments = 1 << iota
)

// Has reports whether c contains every commitment of o.
func (c Commitments) Has(o Commitments) bool { return c&o == o }

// String lists the commitments, for messages and compiled output.
func (c Commitments) String() string {
	if c.Has(KVCopy) {
		return "KVCopy"
	}
	return "none"
}

// Session identifies the conversation a request belongs to. Its JSON form
// is a booking's session object (pkg/bookingapi).
type Session struct {
	// ID is empty for a request outside any session.
	ID string `json:"id"`
	// Turn counts the session's requests from 1.
	Turn int `json:"turn"`
	// Final is set on the session's last turn.
	Final bool `json:"final"`
}

// CommittedCopy is the worker-selection policy's decision that the booked
// worker should pull some prompt blocks from a peer. Its JSON form is a
// booking's committed_kv_copy object (pkg/bookingapi).
type CommittedCopy struct {
	// SourceWorker is the ID of the worker that holds the blocks.
	SourceWorker string `json:"source_worker"`
	// SourceEndpoint is the source's KV control endpoint, e.g.
	// tcp://10.0.0.7:23280: the booking's, or the one the source worker
	// advertises for SourceRank (router_hint_source_control_endpoints).
	// It is empty when neither gives one; such a copy cannot be sent, since
	// the engines' KV connector refuses a kv.fetch without a source
	// endpoint (CheckAction holds every fetch to that rule).
	SourceEndpoint string `json:"source_endpoint,omitempty"`
	// SourceRank is the source's data-parallel rank whose blocks are
	// copied; 0 unless the router says otherwise.
	SourceRank int `json:"source_rank,omitempty"`
	// BlockHashes are the hashes of the blocks to copy, in prompt order.
	BlockHashes []uint64 `json:"block_hashes"`
}

// HintContext is what a hint policy knows about one booking. The dispatcher
// owns it; policies read it and must not keep it.
type HintContext struct {
	// RequestID identifies the request; it becomes the hint's message ID.
	RequestID string
	// Role is the stage the worker was booked for (prefill, decode, ...).
	Role string
	// Worker is the ID of the booked worker.
	Worker string
	// PromptTokens is the prompt length in tokens.
	PromptTokens int
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// Session is the request's session; Session.ID is empty outside one.
	Session Session

	// host is what only the dispatcher sets, through the bridge: the
	// committed copy, the running policy's commitments, the payload arena
	// and the lent actions.
	host hostbridge.State[CommittedCopy, Action]
}

func init() {
	hostbridge.Register(func(hc *HintContext) *hostbridge.State[CommittedCopy, Action] { return &hc.host })
}

// PayloadWriter returns a writer for one payload of about size bytes: in
// the booking's arena when the dispatcher lent one with room, else in a
// buffer of its own. Close it with ClosePayload. A payload written in the
// arena is valid until the dispatcher has encoded the hint, which is all a
// policy may rely on anyway.
func (hc *HintContext) PayloadWriter(size int) ObjectWriter {
	start := len(hc.host.Arena)
	if cap(hc.host.Arena)-start >= size {
		return ObjectWriter{buf: hc.host.Arena[start:start]}
	}
	return ObjectWriter{buf: make([]byte, 0, size)}
}

// ClosePayload closes a writer from PayloadWriter and returns its payload,
// taking its bytes out of the arena.
func (hc *HintContext) ClosePayload(w *ObjectWriter) (Payload, error) {
	p, err := w.Payload()
	if err != nil {
		return Payload{}, err
	}
	// Advance the arena past the payload, unless the writer was not in the
	// arena or outgrew it and moved to memory of its own.
	start := len(hc.host.Arena)
	if n := len(p.raw); n > 0 && start+n <= cap(hc.host.Arena) && &hc.host.Arena[:start+1][start] == &p.raw[0] {
		hc.host.Arena = hc.host.Arena[:start+n]
	}
	return p, nil
}

// Actions returns an empty slice with room for n actions, for BuildHints to
// append its actions to and return: in memory the dispatcher lends for the
// booking when it has room for n more, else in a slice of its own. It
// spares a policy whose actions differ on every booking an allocation per
// booking. Like a payload written in the arena, the slice is valid until
// the dispatcher has encoded the hint; appending past n moves it to memory
// of its own.
func (hc *HintContext) Actions(n int) []Action {
	lent := hc.host.Actions
	if start := len(lent); n > 0 && cap(lent)-start >= n {
		hc.host.Actions = lent[:start+n]
		return lent[start : start : start+n]
	}
	return make([]Action, 0, n)
}

// CommittedKVCopy returns the booking's committed KV copy, or nil when there
// is none or when the calling policy did not declare the KVCopy commitment.
func (hc *HintContext) CommittedKVCopy() *CommittedCopy {
	if !Commitments(hc.host.Granted).Has(KVCopy) {
		hc.host.Denied = true
		return nil
	}
	return hc.host.KVCopy
}

// Action is one engine-directed KV action, e.g. kv.fetch@1.0.
type Action struct {
	// Type names the action, e.g. "kv.fetch".
	Type string
	// Version is the payload schema version, e.g. "1.0".
	Version string
	// Payload is the engine-format JSON object.
	Payload Payload
}
