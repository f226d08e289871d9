package hintsconfig

import (
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
	// pkg/router): it reads either form, the per-role one by default, and
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
// when the problems hold an error.
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
