package hintsconfig

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Target is the program that reads a router's policy file, and so whose
// rules decide whether the file is good: the kvhint sidecar, or a
// released Dynamo Frontend.
//
// A caller that validates or compiles "for a target" parses with
// ParseConfigFor and compiles with Compile as usual: the target travels on
// the Config (Config.Target) and on to the Graph, whose Encode writes the
// form the target reads.
type Target string

const (
	// TargetSidecar is the kvhint sidecar (and Go routers that link
	// pkg/dispatch): it reads either form, the per-role one by default, and
	// applies the product's rules (DESIGN section 6).
	TargetSidecar Target = "sidecar"
	// TargetDynamo is a released Dynamo Frontend (--router-policy-config):
	// it reads FormRouterWideHint only, with the YAML library Dynamo pins
	// (YAML 1.2 scalars, duplicate keys refused, numbers read exactly),
	// and the checks of Dynamo's own start-up code: integer keys refuse
	// floats, non-finite floats are refused where Dynamo checks them, null
	// leaves an optional key unset, the root profile and the router block
	// are checked, and only selected instances of linked types are
	// resolved. Where the product is stricter than Dynamo on purpose, its
	// messages say so.
	TargetDynamo Target = "dynamo"
)

// Targets lists the targets, the default first.
var Targets = []Target{TargetSidecar, TargetDynamo}

// Valid reports whether t is a target; the empty target is the default.
func (t Target) Valid() bool { return t == "" || slices.Contains(Targets, t) }

// OrDefault returns t, or TargetSidecar for the empty target.
func (t Target) OrDefault() Target {
	if t == "" {
		return TargetSidecar
	}
	return t
}

// Form returns the policy-file form the target reads: FormRouterWideHint
// for TargetDynamo; for TargetSidecar the empty form, which reads the form
// from the file (FormPerRoleHints unless it has a root kv_hint_policy).
func (t Target) Form() Form {
	if t == TargetDynamo {
		return FormRouterWideHint
	}
	return ""
}

// ParseTarget reads a target's name, as flags write it.
func ParseTarget(s string) (Target, error) {
	t := Target(s)
	if s == "" || !t.Valid() {
		return "", fmt.Errorf("%q is not a target; use %s", s, targetList())
	}
	return t, nil
}

func targetList() string {
	s := make([]string, len(Targets))
	for i, t := range Targets {
		s[i] = string(t)
	}
	return strings.Join(s, " or ")
}

// ParseConfigFor reads a policy file as target reads it. For TargetDynamo
// the file must be in FormRouterWideHint and is held to Dynamo's parse
// rules; for TargetSidecar it is ParseConfig. The returned Config carries
// the target, so Compile applies that target's start-up rules.
func ParseConfigFor(data []byte, target Target) (*Config, error) {
	if !target.Valid() {
		return nil, Problems{configProblem("", fmt.Sprintf("target %q is not one of %s", target, targetList()))}
	}
	if target.OrDefault() == TargetDynamo {
		return parseDynamo(data)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, err
	}
	cfg.Target = TargetSidecar
	return cfg, nil
}

// CompileFor parses a policy file for target and compiles it: the graph
// of the roles that passed, and every problem found. The file is refused
// when the problems hold an error. For TargetDynamo the build is a stock
// one; a caller checking against a router's declared catalog parses with
// ParseConfigFor, sets Config.DeclaredCatalog, and calls Compile.
func CompileFor(cat *hints.Catalog, data []byte, target Target, modes Modes) (*Graph, Problems) {
	cfg, err := ParseConfigFor(data, target)
	if err != nil {
		if probs, ok := err.(Problems); ok {
			return nil, probs
		}
		return nil, Problems{configProblem("", err.Error())}
	}
	return Compile(cat, cfg, modes)
}

// DynamoStockSelectionTypes are the worker-selection types every Dynamo
// build links (the stock catalog: dynamo_custom_policy_builtin in 1.6),
// with the parameters of the stock parameter structs.
var DynamoStockSelectionTypes = []string{
	"dynamo-default-cost-fn", "dynamo-two-tier-cost-fn", "dynamo-soft-affinity-load-guard",
	"dynamo-round-robin", "dynamo-random", "dynamo-power-of-two-choices",
	"dynamo-least-loaded", "dynamo-direct", "dynamo-device-aware-weighted",
}

// stockLinked reports whether a worker-selection type is linked into a
// Dynamo build: any type of a declared catalog, else a stock type.
func (c *Config) stockLinked(typ string) bool {
	return c.DeclaredCatalog || slices.Contains(DynamoStockSelectionTypes, typ)
}

// dynamoHintPolicyLinked refuses, for TargetDynamo without a declared
// catalog, a kv_hint_policy: no stock Dynamo catalog registers a KV-hint
// policy, so a stock Frontend refuses to start on any.
func (c *Config) dynamoHintPolicyLinked() *Problem {
	if c.Target != TargetDynamo || c.DeclaredCatalog || c.HintPolicy == nil {
		return nil
	}
	p := &Problem{Severity: SeverityError, Reason: ReasonUnknownHintType, Hint: NoHint, Type: c.HintPolicy.Type,
		Message: fmt.Sprintf("kv_hint_policy: KV-hint policy type %q is not linked into a stock Dynamo build (linked KV-hint policy types: none; no stock catalog registers one), so the Frontend would not start; "+
			"kvhint's hint types run in the kvhint sidecar (target sidecar), and a Frontend runs one only where its build registers it, which its declared catalog says", c.HintPolicy.Type)}
	if c.source != nil {
		p.Line = c.source.lines[kvHintPolicyKey+"/type"]
	}
	return p
}

// dynamoClassifier checks request_classifier for TargetDynamo: no stock
// catalog registers one; a declared catalog does not list them, so there
// it is left to Dynamo's start-up check.
func (c *Config) dynamoClassifier() Problems {
	var typ struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(c.Unchecked["request_classifier"], &typ)
	p := Problem{Severity: SeverityError, Reason: ReasonInvalidConfig, Hint: NoHint, Type: typ.Type,
		Message: fmt.Sprintf("request_classifier: request classifier type %q is not linked into a stock Dynamo build (no stock catalog registers a request classifier), so the Frontend would not start", typ.Type)}
	if c.DeclaredCatalog {
		p.Severity, p.Reason = SeverityWarning, ReasonNotChecked
		p.Message = fmt.Sprintf("request_classifier: a declared catalog does not list request classifiers; Dynamo checks at start-up that its build registers type %q", typ.Type)
	}
	if c.source != nil {
		p.Line = c.source.lines["request_classifier/type"]
	}
	return Problems{p}
}

// dynamoSelected checks, for TargetDynamo, what a Frontend checks of a
// selected instance before its provider parses it: the router mode, and
// that its type is linked. nil when the role passes.
func (c *Config) dynamoSelected(role string, e *RoleEntry, mode RouterMode) *Problem {
	if mode == "" {
		mode = ModeKV
	}
	instance := ""
	switch {
	case e == nil:
		return nil
	case e.Instance != "":
		instance = e.Instance
	case c.readReleased || e.Type == BuiltinSelectionType || mode != ModeKV:
		// default, Dynamo's built-in selector, under any mode; a config
		// built in code is written so off the KV path too.
		return nil
	default:
		// A config built in code (the manager's): written as an
		// instance named after the role (Graph.Encode).
		instance = role
	}
	if mode != ModeKV {
		return &Problem{Severity: SeverityError, Reason: ReasonInvalidRouterMode, Role: role, Hint: NoHint, Type: e.Type,
			Message: fmt.Sprintf("the role selects instance %q under router mode %q, and Dynamo refuses it: linked worker-selection policies require --router-mode kv; "+
				"outside kv mode a role names default (the router mode chooses the worker)", instance, mode)}
	}
	if !c.stockLinked(e.Type) {
		return &Problem{Severity: SeverityError, Reason: ReasonUnknownWorkerSelection, Role: role, Hint: NoHint, Type: e.Type,
			Message: fmt.Sprintf("instance %q: unknown worker-selection policy type %q; linked policy types: %s (a stock Dynamo build; "+
				"kvhint's own types run only in its sidecar, and a Frontend links others only where its declared catalog says so)",
				instance, e.Type, strings.Join(DynamoStockSelectionTypes, ", "))}
	}
	return nil
}

// dynamoUnselected warns of instances no role selects that would not
// start if one did: Dynamo never resolves them, so it starts as is.
func (c *Config) dynamoUnselected(cat *hints.Catalog) Problems {
	selected := map[string]bool{}
	for _, e := range c.WorkerSelection {
		if e != nil && e.Instance != "" {
			selected[e.Instance] = true
		}
	}
	var probs Problems
	for i, inst := range c.Instances {
		if selected[inst.Name] {
			continue
		}
		var why string
		p, ok := cat.Selection(inst.Type)
		switch {
		case !ok || !c.stockLinked(inst.Type):
			why = fmt.Sprintf("its type %q is not linked", inst.Type)
		default:
			if _, err := safeParse(func() (hints.SelectionPolicy, error) { return p.Parse(inst.Parameters) }); err != nil {
				why = err.Error()
			}
		}
		if why == "" {
			continue
		}
		probs = append(probs, Problem{Severity: SeverityWarning, Reason: ReasonNotChecked, Hint: NoHint, Type: inst.Type,
			Message: fmt.Sprintf("worker_selection.instances[%d] %q: no role selects it, so Dynamo never resolves it and the Frontend starts; selected, it would not: %s", i, inst.Name, why)})
	}
	if c.source != nil {
		c.source.locate(probs)
	}
	return probs
}
