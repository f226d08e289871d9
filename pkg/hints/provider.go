package hints

import (
	"encoding/json"
	"fmt"
)

// Params is the raw parameters object of one policy instance, as JSON. An
// empty Params means no parameters were given.
type Params = json.RawMessage

// HintProvider registers a hint policy type in a Catalog.
type HintProvider struct {
	// Type is the name roles use, e.g. "kv-fetch" (see CheckTypeName).
	Type string
	// Commitments lists the selection decisions the policy consumes; a
	// policy sees the committed KV copy only if it declares KVCopy.
	Commitments Commitments
	// DefaultHosts names the worker-selection policies this hint runs under
	// when a role does not list its hints. Empty: only where a role lists it.
	// A default runs with no parameters, so Parse must accept none; and a
	// KVCopy policy may be a default only under a selection that has no
	// other default KVCopy policy (Catalog.RegisterHint refuses both, and
	// Catalog.SetDefaultHosts changes a registered type's hosts).
	DefaultHosts []HintHost
	// Parse turns parameters into a ready policy. It must be strict: unknown
	// keys, wrong types and out-of-range values are errors, preferably a
	// *ParamError naming the key. DecodeParams does the decoding part.
	Parse func(params Params) (HintPolicy, error)
	// Description is one line for `kvhint catalog` and error messages.
	Description string
	// NeverBlocks declares that BuildHints only computes: it never sleeps,
	// waits or does I/O, so that its time is bounded by its work. The
	// dispatcher of pkg/dispatch runs such a policy inline on the booking
	// and always keeps its actions, however long the run took (a late run
	// of a policy that only computes is the machine's doing, and dropping
	// it would save no time); it is never ejected. A policy that does not
	// declare it runs on a goroutine of its own, under a hard deadline,
	// and is ejected from its role's path while it keeps overrunning. A
	// policy that declares it and blocks holds every booking of its role
	// for as long as it blocks: declare it only for code that cannot
	// (hintstest checks it).
	NeverBlocks bool
}

// HintHost says which worker-selection policies a hint runs under by default.
type HintHost struct {
	selection string
	any       bool
}

// WorkerSelection hosts a hint under one worker-selection policy type,
// which must be registered in the catalog before the hint.
func WorkerSelection(selectionType string) HintHost { return HintHost{selection: selectionType} }

// AnyWorkerSelection hosts a hint under every worker-selection policy.
var AnyWorkerSelection = HintHost{any: true}

// Hosts reports whether the host covers the worker-selection policy type.
func (h HintHost) Hosts(selectionType string) bool { return h.any || h.selection == selectionType }

// String names the host, for listings.
func (h HintHost) String() string {
	if h.any {
		return "*"
	}
	return h.selection
}

// SelectionPolicy is a parsed worker-selection policy. kv-hint-operator does
// not choose workers; it needs to know what the policy commits so that the
// rules can check the hints that send those commitments.
type SelectionPolicy interface {
	// CommitsKVCopies reports whether the policy, as parameterised, may
	// commit KV copies.
	CommitsKVCopies() bool
}

// SelectionProvider registers a worker-selection policy type in a Catalog.
type SelectionProvider struct {
	// Type is the name roles use, e.g. "kvcr" (see CheckTypeName).
	Type string
	// Parse turns parameters into a parsed policy, strictly (see HintProvider.Parse).
	Parse func(params Params) (SelectionPolicy, error)
	// Description is one line for listings.
	Description string
}

// ParameterReporter is implemented by parsed policies that can report their
// effective parameters. Compiled configs and status then show what actually
// runs rather than what was written. A policy reports its defaults too when
// they are its own; when the router fills an unset value from its own
// configuration (as Dynamo does for the cost parameters of its worker
// selections), the policy reports only the keys that were set, since a
// default written into the compiled file would override the router's.
type ParameterReporter interface {
	EffectiveParameters() any
}

// ParameterWarner is implemented by parsed policies whose parameters are
// valid but deserve a look (a value the router accepts whose effect is
// unusual). Each warning names its key; the rules report them as
// warnings, never as refusals.
type ParameterWarner interface {
	ParameterWarnings() []*ParamError
}

func (p *HintProvider) check() error {
	if err := CheckTypeName(p.Type); err != nil {
		return fmt.Errorf("hint policy type %q: %w", p.Type, err)
	}
	if p.Parse == nil {
		return fmt.Errorf("hint policy type %q: Parse is nil", p.Type)
	}
	return nil
}

func (p *SelectionProvider) check() error {
	if err := CheckTypeName(p.Type); err != nil {
		return fmt.Errorf("worker-selection type %q: %w", p.Type, err)
	}
	if p.Parse == nil {
		return fmt.Errorf("worker-selection type %q: Parse is nil", p.Type)
	}
	return nil
}
