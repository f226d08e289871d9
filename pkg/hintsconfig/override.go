package hintsconfig

import (
	"fmt"
	"slices"
	"strings"
)

// The settings with which a released Dynamo Frontend picks a
// worker-selection instance outside its policy file, by name, for every
// role or for one (lib/kv-router/src/scheduling/config.rs): for a stage,
// the stage's flag beats its variable, which beats the global variable,
// which beats the file's worker_selection.
const (
	WorkerSelectionPolicyEnv = "DYN_ROUTER_WORKER_SELECTION_POLICY"
	PrefillPolicyFlag        = "--router-prefill-policy"
	PrefillPolicyEnv         = "DYN_ROUTER_PREFILL_POLICY"
	DecodePolicyFlag         = "--router-decode-policy"
	DecodePolicyEnv          = "DYN_ROUTER_DECODE_POLICY"
)

// InstanceOverride is one setting that picks a worker-selection instance
// outside the policy file, as read from where the router starts (a pod
// template).
type InstanceOverride struct {
	// Role is the role it picks for: prefill or decode, or empty for
	// every role (DYN_ROUTER_WORKER_SELECTION_POLICY).
	Role string
	// Setting says where the value came from, for messages, such as
	// `--router-prefill-policy of container "main"`.
	Setting string
	// Value is the instance name it picks.
	Value string
}

// CheckInstanceOverrides says, for each override, whether its value names
// an instance of the policy file's worker_selection.instances or default
// (Dynamo's built-in selector): one problem, with
// ReasonUnknownWorkerSelection, for each that names neither, since the
// Frontend refuses to start on it. policyFile is the file the router
// reads (a compiled one, in either form: only instances can be named, so
// a file in FormPerRoleHints, which has none, takes only default). An
// error means the file itself cannot be read.
func CheckInstanceOverrides(policyFile []byte, overrides []InstanceOverride) (Problems, error) {
	cfg, err := ParseConfig(policyFile)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, inst := range cfg.Instances {
		names = append(names, inst.Name)
	}
	slices.Sort(names)
	var probs Problems
	for _, o := range overrides {
		if o.Value == defaultSelection || slices.Contains(names, o.Value) {
			continue
		}
		known := "none"
		if len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		probs = append(probs, Problem{
			Severity: SeverityError, Reason: ReasonUnknownWorkerSelection, Role: o.Role, Hint: NoHint,
			Message: fmt.Sprintf("%s is %q, which names no instance of the policy file's worker_selection.instances (instances: %s) nor default, the built-in selector; "+
				"the router would refuse to start: name one of them, or leave the setting out", o.Setting, o.Value, known),
		})
	}
	return probs, nil
}
