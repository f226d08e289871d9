package hintsconfig_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func TestParseConfigShapes(t *testing.T) {
	cfg := mustParse(t, `
router_mode: kv
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
    type: round-robin
    router_mode: round-robin
    hints: []
`)
	if cfg.RouterMode != hintsconfig.ModeKV {
		t.Errorf("router_mode = %q", cfg.RouterMode)
	}
	prefill := cfg.WorkerSelection["prefill"]
	if prefill.Type != "dynamo-default-cost-fn" || prefill.Hints != nil {
		t.Errorf("bare entry = %+v; want type only and hints absent", prefill)
	}
	encode := cfg.WorkerSelection["encode"]
	if encode.Hints == nil || len(*encode.Hints) != 0 || encode.RouterMode != hintsconfig.ModeRoundRobin {
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
		{"unknown top-level key", "worker_selection: {}\nrouter_mod: kv\n", "", []string{`"router_mod"`, "router_mode, worker_selection"}},
		{"duplicate key", "worker_selection:\n  decode: kvcr\n  decode: kvcr\n", "", []string{"not valid YAML", "decode"}},
		{"router_mode of the wrong type", "router_mode: [kv]\nworker_selection: {}\n", "", []string{"router_mode must be a string"}},
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
	cfg := mustParse(t, "router_mode: random\nworker_selection:\n  decode: {type: kvcr, router_mode: kv, hints: [], parameters: {b: 1, a: 2}}\n")
	out, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `router_mode: random
worker_selection:
  decode:
    hints: []
    parameters:
      a: 2
      b: 1
    router_mode: kv
    type: kvcr
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
}
