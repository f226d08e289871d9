package hintsconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// Form is which of the two shapes of Dynamo's policy file a router's build
// reads. The rules and the compiled graph are the same for both; what one
// form can say, the other may not.
type Form string

const (
	// FormPerRoleHints is the shape of Dynamo's developer documentation,
	// and the default: each role of worker_selection is a worker-selection
	// type with its parameters and its own list of hint policies
	// ({type, parameters, hints}), or a bare type that runs the defaults
	// of its worker selection.
	FormPerRoleHints Form = "PerRoleHints"
	// FormRouterWideHint is the shape a released Dynamo Frontend reads
	// (lib/kv-router: scheduling/worker_selection_config.rs,
	// plugins/kv_hint/config.rs): each role names an entry of
	// worker_selection.instances ({name, type, parameters}) or "default",
	// Dynamo's built-in selector, and one kv_hint_policy {type,
	// parameters} at the root runs for the whole router: every role on the
	// KV path runs it, and without it no role runs any hint policy. Roles
	// that need different hint policies, or more than one, cannot be
	// written in this form.
	FormRouterWideHint Form = "RouterWideHint"
)

// Forms lists the forms, the default first.
var Forms = []Form{FormPerRoleHints, FormRouterWideHint}

// Valid reports whether f is a form; the empty form is the default.
func (f Form) Valid() bool { return f == "" || slices.Contains(Forms, f) }

// OrDefault returns f, or FormPerRoleHints for the empty form.
func (f Form) OrDefault() Form {
	if f == "" {
		return FormPerRoleHints
	}
	return f
}

// carries says, for messages, what a form can hold.
func (f Form) carries() string {
	if f.OrDefault() == FormRouterWideHint {
		return "one kv_hint_policy for the whole router, which every role on the KV path runs (roles name worker_selection.instances); " +
			"it cannot give roles different hint policies, nor one role more than one"
	}
	return "each role's own list of hint policies under worker_selection.<role>.hints"
}

// kvHintPolicyKey is the root key of the RouterWideHint form's hint policy.
const kvHintPolicyKey = "kv_hint_policy"

// ReasonPolicyFormCannotCarry: the roles of a router need more than the
// policy-file form its build reads can say (in FormRouterWideHint:
// different hint policies per role, or more than one).
const ReasonPolicyFormCannotCarry Reason = wellknown.ReasonPolicyFormCannotCarry

// RouterWideHintPolicy returns the one hint policy that every role on the
// KV path of roles runs, nil when none of them runs any, or the problem
// that says why FormRouterWideHint cannot carry the roles: a role runs
// more than one hint policy, or two roles run different ones (type and
// effective parameters; a name is not part of the form), or one runs a
// policy and another runs none. Roles off the KV path run no hints and
// do not count.
func RouterWideHintPolicy(roles []*Role) (*Hint, *Problem) {
	var policy *Hint
	var first string
	runs := map[string]string{}
	differ := false
	for _, r := range roles {
		if r.Mode != ModeKV {
			continue
		}
		runs[r.Name] = describeHints(r.Hints)
		if len(r.Hints) > 1 {
			differ = true
		}
		var h *Hint
		if len(r.Hints) == 1 {
			h = r.Hints[0]
		}
		if first == "" {
			first, policy = r.Name, h
			continue
		}
		if !sameHint(policy, h) {
			differ = true
		}
	}
	if !differ {
		return policy, nil
	}
	var parts []string
	for _, name := range Roles {
		if d, ok := runs[name]; ok {
			parts = append(parts, fmt.Sprintf("role %s runs %s", name, d))
		}
	}
	return nil, &Problem{
		Severity: SeverityError, Reason: ReasonPolicyFormCannotCarry, Hint: NoHint,
		Message: fmt.Sprintf("the router's build reads the %s policy-file form, which carries %s, but %s; "+
			"give every role on the KV path the same single hint policy (or none), or declare policyFileForm: %s in the router's catalog if its build reads per-role hints",
			FormRouterWideHint, FormRouterWideHint.carries(), strings.Join(parts, ", "), FormPerRoleHints),
	}
}

// describeHints renders a role's hint policies for a message.
func describeHints(hs []*Hint) string {
	if len(hs) == 0 {
		return "no hint policy"
	}
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.Type
		if len(h.Params) > 0 {
			s[i] += " " + string(h.Params)
		}
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// sameHint reports whether two roles run the same hint policy (or both
// none): the same type and the same effective parameters.
func sameHint(a, b *Hint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && string(canonicalJSON(a.Params)) == string(canonicalJSON(b.Params))
}

// marshalRouterWide renders the graph in FormRouterWideHint: one instance
// per role, named after the role (a valid identifier, never "default",
// unique), each role naming its own, except a role that runs
// BuiltinSelectionType with no parameters, which names default; the hint
// policy of the KV roles at the root; the unchecked root keys as written.
func (g *Graph) marshalRouterWide() ([]byte, error) {
	if g.written != nil {
		return g.written.marshalWritten()
	}
	policy, prob := RouterWideHintPolicy(g.Roles)
	if prob != nil {
		return nil, Problems{*prob}
	}
	root := make(map[string]any, len(g.Unchecked)+2)
	for k, v := range g.Unchecked {
		root[k] = v
	}
	if policy != nil {
		root[kvHintPolicyKey] = typedEntry{Type: policy.Type, Parameters: canonicalJSON(policy.Params)}
	}
	if len(g.Roles) > 0 {
		ws := map[string]any{}
		instances := make([]instanceEntry, 0, len(g.Roles))
		for _, r := range g.Roles {
			params := canonicalJSON(r.Selection.Params)
			if r.Mode != ModeKV && r.Mode != "" {
				// Off the KV path the router mode chooses the worker, and
				// Dynamo refuses a selected instance there (linked
				// worker-selection policies require --router-mode kv).
				ws[r.Name] = defaultSelection
				continue
			}
			if r.Selection.Type == BuiltinSelectionType && len(params) == 0 {
				// Dynamo's built-in selector, as the file reads it back:
				// no instance, so no type the build must link.
				ws[r.Name] = defaultSelection
				continue
			}
			ws[r.Name] = r.Name
			instances = append(instances, instanceEntry{Name: r.Name, Type: r.Selection.Type, Parameters: params})
		}
		if len(instances) > 0 {
			ws[instancesKey] = instances
		}
		root["worker_selection"] = ws
	}
	js, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(js)
}

// typedEntry is {type, parameters}, as kv_hint_policy is written.
type typedEntry struct {
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// instanceEntry is one worker_selection.instances entry.
type instanceEntry struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// routerWideEntry reads one role of a FormRouterWideHint file: a string
// that names an instance, or "default" (Dynamo's built-in selector, run
// as BuiltinSelectionType). Its hints are the file's kv_hint_policy, given
// by Compile.
func routerWideEntry(role string, raw json.RawMessage, instances map[string]*Instance) (*RoleEntry, error) {
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return nil, fmt.Errorf("%s (got %s); in the %s form a role names an instance of worker_selection.instances, or default "+
			"(the mapping with type, parameters and hints is the %s form's)", serdeType(raw, "a string"), shorten(raw), FormRouterWideHint, FormPerRoleHints)
	}
	if name == defaultSelection {
		return &RoleEntry{Type: BuiltinSelectionType}, nil
	}
	inst, ok := instances[name]
	if !ok {
		// Dynamo's words (worker_selection_config.rs).
		return nil, fmt.Errorf("worker_selection %s %q does not name a configured instance; instances: %s (or default, the built-in selector)",
			role, name, instanceNames(instances))
	}
	return &RoleEntry{Type: inst.Type, Parameters: inst.Parameters, Instance: inst.Name}, nil
}

func instanceNames(instances map[string]*Instance) string {
	if len(instances) == 0 {
		return "none"
	}
	names := make([]string, 0, len(instances))
	for n := range instances {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// parseKVHintPolicy reads the root kv_hint_policy of a FormRouterWideHint
// file as Dynamo does (plugins/kv_hint/config.rs): a mapping of type and
// parameters only; the type an identifier and not "default", which is
// reserved for no custom policy; parameters a mapping when given.
func parseKVHintPolicy(raw json.RawMessage) (*HintSpec, Problems) {
	fail := func(msg string) (*HintSpec, Problems) {
		return nil, Problems{configProblem("", "kv_hint_policy: "+msg)}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return fail(fmt.Sprintf("got %s, want a mapping with type and parameters", shorten(raw)))
	}
	spec := &HintSpec{}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		switch key {
		case "type":
			if err := decodeField(fields[key], &spec.Type, "a string"); err != nil {
				return fail("type: " + err.Error())
			}
		case "parameters":
			if isNull(fields[key]) {
				return fail("parameters: null: parameters must be a YAML mapping (leave the key out for none)")
			}
			p, err := decodeParamsField(fields[key])
			if err != nil {
				return fail("parameters: " + err.Error() + " (Dynamo: kv_hint_policy parameters must be a YAML mapping)")
			}
			spec.Parameters = p
		default:
			return fail(fmt.Sprintf("unknown key %q; known: parameters, type", key))
		}
	}
	switch {
	case spec.Type == "":
		return fail("type is required: the hint policy the router runs")
	case spec.Type == defaultSelection:
		return fail("type 'default' is reserved; omit kv_hint_policy to disable custom hint formulation")
	case !identifierRe.MatchString(spec.Type):
		return fail(fmt.Sprintf("type %q must be made of letters, digits, '_', '.' and '-'", spec.Type))
	}
	return spec, nil
}

// isNull reports whether a JSON value is null.
func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// EntryUnder returns a role's entry as the role runs it under mode: in
// FormRouterWideHint an entry that lists no hints runs the file's
// kv_hint_policy on the KV path and none elsewhere; otherwise the entry as
// it is. nil when the config has no such role.
func (c *Config) EntryUnder(role string, mode RouterMode) *RoleEntry {
	e, ok := c.WorkerSelection[role]
	if !ok || e == nil || c.Form != FormRouterWideHint || e.Hints != nil {
		return e
	}
	out := *e
	hs := []HintSpec{}
	if c.HintPolicy != nil && (mode == ModeKV || mode == "") {
		hs = []HintSpec{*c.HintPolicy}
	}
	out.Hints = &hs
	return &out
}

// marshalWritten writes a FormRouterWideHint config read from text back as
// it was written: every root key, the hint policy, each role naming what
// it named, every instance (selected or not) by its own name, values as
// written. Compiling a file writes the file, not a rebuilt one.
func (c *Config) marshalWritten() ([]byte, error) {
	root := make(map[string]any, len(c.Unchecked)+2)
	for k, v := range c.Unchecked {
		root[k] = v
	}
	if c.HintPolicy != nil {
		root[kvHintPolicyKey] = typedEntry{Type: c.HintPolicy.Type, Parameters: writtenParams(c.HintPolicy.Parameters)}
	}
	if len(c.WorkerSelection) > 0 || len(c.Instances) > 0 {
		ws := map[string]any{}
		for role, e := range c.WorkerSelection {
			ws[role] = defaultSelection
			if e.Instance != "" {
				ws[role] = e.Instance
			}
		}
		if len(c.Instances) > 0 {
			instances := make([]instanceEntry, len(c.Instances))
			for i, inst := range c.Instances {
				instances[i] = instanceEntry{Name: inst.Name, Type: inst.Type, Parameters: writtenParams(inst.Parameters)}
			}
			ws[instancesKey] = instances
		}
		root["worker_selection"] = ws
	}
	js, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(js)
}

// writtenParams is a parameters mapping as written, keys sorted; nil for
// none.
func writtenParams(p hints.Params) json.RawMessage {
	if len(p) == 0 {
		return nil
	}
	return json.RawMessage(canonicalJSON(p))
}
