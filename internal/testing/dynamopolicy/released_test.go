package dynamopolicy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckReleasedFixtures holds the released model to files written
// after Dynamo's own released examples and tests (each names its source):
// every testdata/released/*.valid.yaml is accepted.
func TestCheckReleasedFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/released/*.valid.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			doc, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckReleased(doc); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}

// TestCheckReleased is what a released Dynamo Frontend refuses, in its
// words (worker_selection_config.rs, kv_hint/config.rs, policy_config.rs,
// and the fixtures of policy_config.rs's tests).
func TestCheckReleased(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"an unknown root key", "router_mode: kv\nworker_selection:\n  encode: default\n", "unknown field `router_mode`"},
		{"instance parameters that are not a mapping", "worker_selection:\n  instances:\n    - name: alpha\n      type: alpha\n      parameters: 1\n",
			`worker_selection instance "alpha" parameters must be a YAML mapping`},
		{"instance parameters null", "worker_selection:\n  instances:\n    - {name: alpha, type: alpha, parameters: null}\n", "parameters must be a YAML mapping"},
		{"an empty worker_selection", "worker_selection: {}\n", "worker_selection must define an instance or an aggregated, prefill, decode, or encode selection"},
		{"a role that names a missing instance", "worker_selection:\n  encode: missing\n", `worker_selection encode "missing" does not name a configured instance`},
		{"a role written as the per-role mapping of the docs", "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n", "invalid type: map, expected a string"},
		{"an instance named default", "worker_selection:\n  instances: [{name: default, type: dynamo-random}]\n", "'default' is reserved for Dynamo's built-in selector"},
		{"two instances of one name", "worker_selection:\n  instances: [{name: a, type: dynamo-random}, {name: a, type: dynamo-direct}]\n", `duplicate instance "a"`},
		{"an unknown instance key", "worker_selection:\n  instances: [{name: a, type: dynamo-random, params: {}}]\n", "unknown field `params`"},
		{"an instance name that is not an identifier", "worker_selection:\n  instances: [{name: 'a b', type: dynamo-random}]\n", "not a valid identifier"},
		{"kv_hint_policy type default", "kv_hint_policy: {type: default}\n", "kv_hint_policy type 'default' is reserved; omit kv_hint_policy to disable custom hint formulation"},
		{"kv_hint_policy parameters that are not a mapping", "kv_hint_policy: {type: test, parameters: [1]}\n", "kv_hint_policy parameters must be a YAML mapping"},
		{"kv_hint_policy with a name", "kv_hint_policy: {type: test, name: x}\n", "unknown field `name`"},
		{"kv_hint_policy without a type", "kv_hint_policy: {parameters: {}}\n", "not a valid identifier"},
		{"nothing at all", "{}\n", "must define"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckReleased([]byte(tt.doc))
			if err == nil {
				t.Fatalf("accepted; want a refusal saying %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("refusal %q does not say %q", err, tt.want)
			}
		})
	}
}
