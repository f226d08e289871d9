package declared

import (
	"errors"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestDynamoDeclaration loads the shipped declaration of Dynamo's
// documented types and holds it to Dynamo's own fixtures: a load-only
// selection refuses any key (seed: 7 under dynamo-round-robin), an unknown
// two-tier key is refused naming it (cache_affinity_threshold), and kvcr
// commits KV copies only when shared_cache_multiplier is set above 0; the
// dev docs' example role, harness_prefetch with max_blocks 64 under
// dynamo-default-cost-fn, passes the rules.
func TestDynamoDeclaration(t *testing.T) {
	cat := loadFile(t, "../../config/catalogs/dynamo.yaml").Catalog
	for _, tc := range []struct {
		typ, params string
		key         string // "" for accepted
		commits     bool
	}{
		{"dynamo-round-robin", `{"seed": 7}`, "seed", false},
		{"dynamo-round-robin", ``, "", false},
		{"dynamo-two-tier-cost-fn", `{"cache_affinity_threshold": 0.8}`, "cache_affinity_threshold", false},
		{"dynamo-two-tier-cost-fn", `{"adaptive": {"update_interval_ms": 50}}`, "", false},
		{"dynamo-two-tier-cost-fn", `{"adaptive": {}, "balance_abs_threshold": 4}`, "adaptive", false},
		{"dynamo-default-cost-fn", `{"seed": 18, "host_cache_hit_weight": 0.5}`, "", false},
		{"dynamo-default-cost-fn", `{"disk_cache_hit_weight": -1}`, "disk_cache_hit_weight", false},
		{"dynamo-soft-affinity-load-guard", `{"move_margin": 0}`, "move_margin", false},
		{"dynamo-soft-affinity-load-guard", `{"max_active_requests": 16, "move_margin": 3}`, "", false},
		{"kvcr", ``, "", false},
		{"kvcr", `{"shared_cache_multiplier": 0.5}`, "", true},
		{"kvcr", `{"shared_cache_multiplier": 0}`, "", false},
	} {
		p, ok := cat.Selection(tc.typ)
		if !ok {
			t.Fatalf("%s is not declared", tc.typ)
		}
		policy, err := p.Parse(hints.Params(tc.params))
		pe, _ := errors.AsType[*hints.ParamError](err)
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%s %s refused: %v", tc.typ, tc.params, err)
		case tc.key != "" && (pe == nil || pe.Key != tc.key):
			t.Errorf("%s %s: %v; want a refusal of key %q", tc.typ, tc.params, err, tc.key)
		case tc.key == "" && policy.CommitsKVCopies() != tc.commits:
			t.Errorf("%s %s: commits KV copies %v, want %v", tc.typ, tc.params, policy.CommitsKVCopies(), tc.commits)
		}
	}

	doc := "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: harness_prefetch\n        parameters: {max_blocks: 64}\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: []\n"
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if _, probs := hintsconfig.Compile(cat, cfg, hintsconfig.Modes{}); len(probs) > 0 {
		t.Errorf("the dev docs' example: %v", probs)
	}
}
