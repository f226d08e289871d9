package hintsconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Graph is a validated configuration, ready to run: every role resolved to
// its parsed worker-selection policy and its ordered, parsed hint policies,
// defaults expanded. A Graph is immutable and safe for concurrent use.
type Graph struct {
	// Roles are sorted by name.
	Roles []*Role
	// Unchecked are the root keys of the file kvhint keeps as written
	// (Config.Unchecked); the compiled file carries them on.
	Unchecked map[string]json.RawMessage
	// Form is the policy-file form Encode writes: the form of the config
	// the graph was compiled from (FormPerRoleHints when it had none).
	Form Form
	// Target is the target of the config the graph was compiled from.
	Target Target
	byName map[string]*Role
	// written is the FormRouterWideHint config read from text that the
	// graph was compiled from, whole: Encode writes it back as written
	// (instance names, unselected instances, values), not rebuilt.
	written *Config
}

// Role looks a role up by name.
func (g *Graph) Role(name string) (*Role, bool) {
	r, ok := g.byName[name]
	return r, ok
}

// Role is one role of a Graph.
type Role struct {
	Name      string
	Mode      RouterMode
	Selection Selection
	// Hints run in this order on every booking. Empty off the KV path.
	Hints []*Hint
	// Defaulted is set when the role did not list hints and runs the
	// defaults of its selection type.
	Defaulted bool
}

// Selection is a role's parsed worker-selection policy.
type Selection struct {
	Type string
	// Params are the effective parameters, canonical JSON (keys sorted).
	Params hints.Params
	Policy hints.SelectionPolicy
}

// Hint is one parsed hint policy instance of a role.
type Hint struct {
	Type string
	// Name is set only where the role named the instance.
	Name string
	// Params are the effective parameters, canonical JSON (keys sorted).
	Params      hints.Params
	Commitments hints.Commitments
	// NeverBlocks is the provider's HintProvider.NeverBlocks.
	NeverBlocks bool
	Policy      hints.HintPolicy
}

// ID is how the hint is known within its role (metrics, logs): its name,
// else its type.
func (h *Hint) ID() string {
	if h.Name != "" {
		return h.Name
	}
	return h.Type
}

// Config renders the graph back as a hints YAML model in its explicit form:
// every role's hints listed, defaults expanded, parameters effective, the
// unchecked root keys as they were written.
func (g *Graph) Config() *Config {
	cfg := &Config{WorkerSelection: make(map[string]*RoleEntry, len(g.Roles)), Unchecked: g.Unchecked, Form: g.Form}
	for _, r := range g.Roles {
		cfg.WorkerSelection[r.Name] = r.Entry()
	}
	return cfg
}

// Modes returns the router mode each role of the graph runs under.
func (g *Graph) Modes() Modes {
	m := Modes{Roles: make(map[string]RouterMode, len(g.Roles))}
	for _, r := range g.Roles {
		m.Roles[r.Name] = r.Mode
	}
	return m
}

// Entry renders the role in explicit form.
func (r *Role) Entry() *RoleEntry {
	e := &RoleEntry{Type: r.Selection.Type, Parameters: r.Selection.Params}
	specs := make([]HintSpec, len(r.Hints))
	for i, h := range r.Hints {
		specs[i] = HintSpec{Type: h.Type, Name: h.Name, Parameters: h.Params}
	}
	e.Hints = &specs
	return e
}

// Encode returns the graph's compiled hints YAML, the same bytes for the
// same graph, and its hash.
//
// In FormRouterWideHint the roles must run what that form can carry
// (RouterWideHintPolicy); if they do not, the error is Problems holding a
// ReasonPolicyFormCannotCarry problem.
func (g *Graph) Encode() (yamlDoc []byte, hash string, err error) {
	var doc []byte
	if g.Form == FormRouterWideHint {
		doc, err = g.marshalRouterWide()
	} else {
		doc, err = g.Config().Marshal()
	}
	if err != nil {
		return nil, "", err
	}
	return doc, ContentHash(doc), nil
}

// ContentHash is the short hash routers report for the config they run:
// the first 16 hex digits of the SHA-256 of the compiled YAML.
func ContentHash(doc []byte) string {
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:8])
}

func newGraph(roles []*Role) *Graph {
	slices.SortFunc(roles, func(a, b *Role) int { return strings.Compare(a.Name, b.Name) })
	g := &Graph{Roles: roles, byName: make(map[string]*Role, len(roles))}
	for _, r := range roles {
		g.byName[r.Name] = r
	}
	return g
}

// canonicalParams returns the parameters to record for a parsed policy: its
// effective parameters when it reports them, else the input with keys sorted.
func canonicalParams(policy any, raw hints.Params) hints.Params {
	if rep, ok := policy.(hints.ParameterReporter); ok {
		js, err := json.Marshal(rep.EffectiveParameters())
		if err != nil {
			return canonicalJSON(raw)
		}
		return canonicalJSON(js)
	}
	return canonicalJSON(raw)
}

// canonicalJSON re-encodes a parameters object with its keys sorted, so that
// equal parameters compile to equal bytes; an empty object becomes nil.
func canonicalJSON(raw []byte) hints.Params {
	if len(raw) == 0 {
		return nil
	}
	// Numbers stay as written: a u64 seed must reach the router exact,
	// not rounded through a float64.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return nil
	}
	js, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return js
}
