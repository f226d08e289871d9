package dynamopolicy

import (
	"strings"
	"testing"
)

// TestCheck holds the model to the fixtures of Dynamo's own tests and
// documentation: what its router accepts and refuses, and in whose words.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string // "" accepts; else words of the refusal
	}{
		{"an instance named by a role", "worker_selection:\n  aggregated: rr\n  instances:\n    - {name: rr, type: dynamo-round-robin}\n", ""},
		{"the documented per-role form", "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: harness_prefetch\n        parameters: {max_blocks: 64}\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: []\n", ""},
		{"the built-in selector", "worker_selection:\n  encode: default\n", ""},
		{"kv_hint_policy", "kv_hint_policy:\n  type: test\n  parameters:\n    enabled: true\n", "must define a root profile"},
		{"an empty worker_selection", "worker_selection: {}\n", "worker_selection must define an instance or an aggregated, prefill, decode, or encode selection"},
		{"parameters that are not a mapping", "worker_selection:\n  instances:\n    - name: alpha\n      type: alpha\n      parameters: 1\n", "parameters must be a YAML mapping"},
		{"a role that names no instance", "worker_selection:\n  encode: missing\n", `encode "missing" does not name a configured instance`},
		{"a role Dynamo does not have", "worker_selection:\n  chat:\n    type: dynamo-random\n", `unknown field "chat"`},
		{"router_mode at the root", "router_mode: kv\nworker_selection:\n  encode: default\n", `unknown field "router_mode"`},
		{"router_mode in a role", "worker_selection:\n  encode: {type: dynamo-random, router_mode: kv}\n", `unknown field "router_mode"`},
		{"an unknown key of a hint", "worker_selection:\n  encode: {type: dynamo-random, hints: [{type: a, params: {}}]}\n", `unknown field "params"`},
		{"a profile that is not whole", "policy_classes: []\nworker_selection:\n  encode: default\n", "go together"},
		{"nothing at all", "{}\n", "must define a root profile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check([]byte(tt.doc))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted; want a refusal saying %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("refusal %q does not say %q", err, tt.want)
			}
		})
	}
}
