package hintsconfig_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func TestParseConfigShapes(t *testing.T) {
	cfg := mustParse(t, `
worker_selection:
  prefill: dynamo-default-cost-fn
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv-fetch
      - type: kv-retain
        name: retain-long
        parameters: {ttl_seconds: 3600}
  encode:
    type: dynamo-round-robin
    hints: []
`)
	prefill := cfg.WorkerSelection["prefill"]
	if prefill.Type != "dynamo-default-cost-fn" || prefill.Hints != nil {
		t.Errorf("bare entry = %+v; want type only and hints absent", prefill)
	}
	encode := cfg.WorkerSelection["encode"]
	if encode.Hints == nil || len(*encode.Hints) != 0 {
		t.Errorf("encode = %+v; want hints: [] kept apart from absent", encode)
	}
	decode := cfg.WorkerSelection["decode"]
	want := []hintsconfig.HintSpec{
		{Type: "kv-fetch"},
		{Type: "kv-retain", Name: "retain-long", Parameters: hints.Params(`{"ttl_seconds":3600}`)},
	}
	if diff := cmp.Diff(want, *decode.Hints); diff != "" {
		t.Errorf("decode hints (-want +got):\n%s", diff)
	}
}

func TestParseConfigRejects(t *testing.T) {
	deep := "worker_selection:\n  decode:\n    type: kvcr\n    parameters:\n      x: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "\n"
	tests := []struct {
		name  string
		doc   string
		role  string
		words []string
	}{
		{"malformed YAML", "worker_selection: {decode: [", "", []string{"not valid YAML"}},
		{"not a mapping", "- a\n- b\n", "", []string{"must be a mapping"}},
		{"empty document", "", "", []string{"must be a mapping"}},
		{"unknown top-level key", "worker_selection: {decode: kvcr}\nrouter_mod: kv\n", "", []string{`"router_mod"`, "worker_selection, default_policy_family, models, policy_classes, request_classifier, router, uncached_isl_buckets"}},
		// The first error a file from an earlier compile meets: it says
		// where the mode went, as the per-role message does.
		{"router_mode is not a key of the file", "router_mode: kv\nworker_selection: {decode: kvcr}\n", "", []string{`"router_mode"`, "not part of the policy file", "--router-mode", "DYN_ROUTER_MODE", "spec.routerMode"}},
		{"router_mode is not a key of an entry", "worker_selection: {decode: {type: kvcr, router_mode: kv}}\n", "decode", []string{`"router_mode"`, "--router-mode"}},
		{"empty worker_selection, as Dynamo's router refuses it", "worker_selection: {}\n", "", []string{"worker_selection must define an instance or an aggregated, prefill, decode, or encode selection"}},
		{"no worker_selection and nothing else", "# nothing\n", "", []string{"must be a mapping"}},
		{"kv_hint_policy makes the released form, where a role names an instance", "kv_hint_policy: {type: test, parameters: {enabled: true}}\nworker_selection: {decode: kvcr}\n", "decode", []string{`decode "kvcr" does not name a configured instance`}},
		{"an instance parameters that are not a mapping (Dynamo's fixture)", "worker_selection:\n  instances:\n    - name: alpha\n      type: alpha\n      parameters: 1\n", "", []string{"instances[0]", "parameters", "mapping"}},
		{"an instance named default", "worker_selection:\n  decode: default\n  instances: [{name: default, type: dynamo-random}]\n", "", []string{"reserved"}},
		{"two instances of one name", "worker_selection:\n  instances: [{name: a, type: dynamo-random}, {name: a, type: dynamo-direct}]\n", "", []string{`"a"`, "already used"}},
		{"an instance name Dynamo refuses", "worker_selection:\n  instances: [{name: 'a b', type: dynamo-random}]\n", "", []string{"letters, digits"}},
		{"duplicate key", "worker_selection:\n  decode: kvcr\n  decode: kvcr\n", "", []string{"not valid YAML", "decode"}},
		{"worker_selection not a mapping", "worker_selection: [decode]\n", "", []string{"worker_selection must be a mapping"}},
		{"unknown key in an entry", "worker_selection:\n  decode: {type: kvcr, hint: []}\n", "decode", []string{`"hint"`}},
		{"unknown key in a hint", "worker_selection:\n  decode: {type: kvcr, hints: [{type: kv-fetch, params: {}}]}\n", "decode", []string{`"params"`}},
		{"hints not a list", "worker_selection:\n  decode: {type: kvcr, hints: kv-fetch}\n", "decode", []string{"hints", "a list"}},
		{"hint without type", "worker_selection:\n  decode: {type: kvcr, hints: [{name: x}]}\n", "decode", []string{"hints[0]", "type is required"}},
		{"entry of the wrong type", "worker_selection:\n  decode: 42\n", "decode", []string{"worker-selection type or a mapping"}},
		{"type of the wrong type", "worker_selection:\n  decode: {type: 7}\n", "decode", []string{"type", "a string"}},
		{"oversize file", "# " + strings.Repeat("x", hintsconfig.MaxConfigBytes) + "\n", "", []string{"over the", "byte limit"}},
		{"deep nesting", deep, "", []string{"not valid YAML"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := hintsconfig.ParseConfig([]byte(tt.doc))
			if err == nil {
				t.Fatalf("ParseConfig accepted it: %+v", cfg)
			}
			probs, ok := err.(hintsconfig.Problems)
			if !ok || len(probs) == 0 {
				t.Fatalf("error %T %v; want hintsconfig.Problems", err, err)
			}
			p := probs[0]
			if p.Reason != hintsconfig.ReasonInvalidConfig || p.Role != tt.role {
				t.Errorf("problem = %+v; want InvalidConfig for role %q", p, tt.role)
			}
			for _, w := range tt.words {
				if !strings.Contains(p.Message, w) {
					t.Errorf("message %q does not mention %q", p.Message, w)
				}
			}
		})
	}
}

func TestParseConfigReportsEveryBrokenRole(t *testing.T) {
	_, err := hintsconfig.ParseConfig([]byte("worker_selection:\n  a: {type: kvcr, x: 1}\n  b: kvcr\n  c: [1]\n"))
	probs, _ := err.(hintsconfig.Problems)
	var roles []string
	for _, p := range probs {
		roles = append(roles, p.Role)
	}
	if diff := cmp.Diff([]string{"a", "c"}, roles); diff != "" {
		t.Errorf("roles with problems (-want +got):\n%s", diff)
	}
}

func TestConfigMarshalRoundTrip(t *testing.T) {
	cfg := mustParse(t, "policy_classes: [{name: chat, quantum: 1}]\nworker_selection:\n  decode: {type: kvcr, hints: [], parameters: {b: 1, a: 2}}\n")
	out, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `policy_classes:
- name: chat
  quantum: 1
worker_selection:
  decode:
    hints: []
    parameters:
      a: 2
      b: 1
    type: kvcr
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
}

// TestParseConfigDynamoRootKeys: the root keys of Dynamo's policy file
// that kvhint has no model of are kept as written and reported, never
// refused, and a file of them alone (Dynamo's router accepts one with
// only a profile) is a config with no role.
func TestParseConfigDynamoRootKeys(t *testing.T) {
	doc := `default_policy_family: interactive
policy_classes:
  - {name: chat, quantum: 4, policy_family: interactive, cache_bucket: short}
uncached_isl_buckets:
  - {min_tokens: 0, bucket: short}
models:
  llama: {default_policy_family: interactive, policy_classes: [], uncached_isl_buckets: []}
request_classifier: {type: thunderagent}
worker_selection:
  decode: dynamo-default-cost-fn
`
	cfg := mustParse(t, doc)
	if got := len(cfg.Unchecked); got != 5 {
		t.Fatalf("unchecked keys = %d (%v); want 5", got, cfg.Unchecked)
	}
	_, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{})
	var notChecked []string
	for _, p := range probs {
		if p.Reason == hintsconfig.ReasonNotChecked && p.Severity == hintsconfig.SeverityWarning {
			notChecked = append(notChecked, strings.SplitN(p.Message, " ", 2)[0])
		}
	}
	if diff := cmp.Diff([]string{"default_policy_family", "models", "policy_classes", "request_classifier", "uncached_isl_buckets"}, notChecked); diff != "" {
		t.Errorf("NotChecked warnings (-want +got):\n%s", diff)
	}
	if probs.HasErrors() {
		t.Errorf("errors: %v", probs.Errors())
	}
	if _, err := hintsconfig.ParseConfig([]byte("models:\n  llama: {default_policy_family: a, policy_classes: [], uncached_isl_buckets: []}\n")); err != nil {
		t.Errorf("a file with a model profile alone: %v", err)
	}
}
