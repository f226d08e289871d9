package declared

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

const builtinDeclaration = "../../config/catalogs/builtin.yaml"

func loadFile(t testing.TB, path string) *Catalog {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := Load(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cat
}

// outcome is what a provider's Parse made of one parameter set, in the
// terms a role's status shows: refused (with the key and message of the
// *hints.ParamError) or accepted (with the effective parameters and, for
// a selection, whether it commits KV copies).
type outcome struct {
	Refused   bool
	Key       string
	Message   string
	Effective string
	Commits   bool
}

func parsed(policy any, err error) outcome {
	if err != nil {
		o := outcome{Refused: true, Message: err.Error()}
		if pe, ok := errors.AsType[*hints.ParamError](err); ok {
			o.Key = pe.Key
		}
		return o
	}
	o := outcome{Effective: effective(policy)}
	if sel, ok := policy.(hints.SelectionPolicy); ok {
		o.Commits = sel.CommitsKVCopies()
	}
	return o
}

// effective is a policy's reported parameters as sorted JSON, an empty
// object as "".
func effective(policy any) string {
	rep, ok := policy.(hints.ParameterReporter)
	if !ok {
		return ""
	}
	js, err := json.Marshal(rep.EffectiveParameters())
	if err != nil {
		return "error: " + err.Error()
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "error: " + err.Error()
	}
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return ""
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// paramCases are parameter sets per type: defaults, good values, and each
// way a provider refuses (unknown key, nested unknown key, wrong type,
// null, out of range, cross-field rules).
var paramCases = map[string][]string{
	builtin.TypeDefaultCostFn: {
		``, `{}`, `{"overlap_score_credit": 2}`, `{"overlap_score_credit": 2.5, "router_temperature": 0.1, "seed": 7}`,
		`{"shared_cache_multiplier": 1}`, `{"shared_cache_multiplier": 1.5}`, `{"shared_cache_multiplier": -0.1}`,
		`{"prefill_load_scale": -1}`, `{"prefill_load_scale": "high"}`, `{"seed": -1}`, `{"seed": 1.5}`,
		`{"seed": "x"}`, `{"bogus": 1}`, `{"router_temperature": null}`, `[1]`, `{"a": 1, "overlap_score_credit": "x"}`,
		`{"zzz": 1, "overlap_score_credit": "x"}`, `{"seed": null, "overlap_score_credit": "x"}`, `{"seed": -1, "router_temperature": -1}`,
	},
	builtin.TypeKVCR: {
		``, `{"shared_cache_multiplier": 0}`, `{"shared_cache_multiplier": 0.25}`, `{"shared_cache_multiplier": 2}`,
		`{"host_cache_hit_weight": -3}`, `{"kv_copy": true}`, `{"seed": 3}`,
	},
	builtin.TypeTwoTierCostFn: {
		``, `{"cache_threshold": 0.7}`, `{"cache_threshold": 1.2}`, `{"balance_abs_threshold": 4}`,
		`{"balance_abs_threshold": -4}`, `{"balance_rel_threshold": 0.5}`, `{"cache_affinity_threshold": 0.8}`,
		`{"adaptive": {}}`, `{"adaptive": {"update_interval_ms": 50, "load_scale": 2}}`,
		`{"adaptive": {"update_interval_ms": 0}}`, `{"adaptive": {"load_scale": 0.5}}`, `{"adaptive": {"typo": 1}}`,
		`{"adaptive": 3}`, `{"adaptive": {}, "cache_threshold": 0.5}`, `{"adaptive": {}, "cache_threshold": 0.7}`,
		`{"adaptive": {}, "cache_threshold": 0.7, "balance_abs_threshold": 8}`,
		`{"adaptive": {}, "balance_rel_threshold": 1.25}`,
	},
	builtin.TypeRoundRobin:          {``, `{}`, `{"seed": 7}`},
	builtin.TypeRandom:              {``, `{"x": 1}`},
	builtin.TypePowerOfTwoChoices:   {``, `{"x": 1}`},
	builtin.TypeLeastLoaded:         {``, `{"x": 1}`},
	builtin.TypeDirect:              {``, `{"x": 1}`},
	builtin.TypeDeviceAwareWeighted: {``, `{"x": 1}`},
	builtin.TypeSoftAffinityLoadGuard: {
		``, `{}`, `{"max_active_requests": 32}`, `{"max_active_requests": 0, "move_margin": 1}`, `{"move_margin": 0}`,
		`{"move_margin": -1}`, `{"max_active_requests": -1}`, `{"max_active_requests": 1.5}`, `{"move_margin": "2"}`,
		`{"group_idle_ttl_secs": 300}`, `{"move_margin": null}`,
	},
	builtin.TypeKVFetch: {
		``, `{"min_blocks": 4}`, `{"min_blocks": 4, "max_blocks": 16}`, `{"min_blocks": 4, "max_blocks": 2}`,
		`{"max_blocks": 0}`, `{"min_blocks": 0}`, `{"min_blocks": 2000000}`, `{"max_blocks": -1}`,
		`{"min_blocks": "4"}`, `{"min_blocks": 1.5}`, `{"min_blocks": null}`, `{"blocks": 4}`,
	},
	builtin.TypeKVRetain: {
		``, `{"ttl_seconds": 60}`, `{"ttl_seconds": 0}`, `{"ttl_seconds": 90000}`, `{"priority": 101}`,
		`{"priority": -1}`, `{"min_prompt_tokens": 128}`, `{"ttl": 60}`, `{"ttl_seconds": true}`,
	},
	builtin.TypeKVEvict: {``, `{}`, `{"now": true}`},
}

// TestBuiltinDeclarationMatchesLinked holds config/catalogs/builtin.yaml to
// the code of pkg/hints/builtin: the same types in the same order, the
// same commitments and default hosts, and on every parameter set of
// paramCases the same outcome: accepted with the same effective
// parameters and KV-copy decision, or refused with the same key and
// message. A declaration that drifts from the code fails here.
func TestBuiltinDeclarationMatchesLinked(t *testing.T) {
	linked := builtin.NewCatalog()
	decl := loadFile(t, builtinDeclaration).Catalog

	if diff := cmp.Diff(linked.SelectionTypes(), decl.SelectionTypes()); diff != "" {
		t.Errorf("worker-selection types (-linked +declared):\n%s", diff)
	}
	type hintShape struct{ Type, Commitments, Hosts string }
	shapes := func(c *hints.Catalog) []hintShape {
		var out []hintShape
		for _, p := range c.HintProviders() {
			out = append(out, hintShape{p.Type, p.Commitments.String(), hostList(p.DefaultHosts)})
		}
		return out
	}
	if diff := cmp.Diff(shapes(linked), shapes(decl)); diff != "" {
		t.Errorf("hint types, commitments and default hosts (-linked +declared):\n%s", diff)
	}
	order := func(ps []*hints.SelectionProvider) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Type)
		}
		return out
	}
	if diff := cmp.Diff(order(linked.SelectionProviders()), order(decl.SelectionProviders())); diff != "" {
		t.Errorf("worker-selection order (-linked +declared):\n%s", diff)
	}

	for _, typ := range append(linked.SelectionTypes(), linked.HintTypes()...) {
		if _, ok := paramCases[typ]; !ok {
			t.Errorf("type %s has no parameter cases", typ)
		}
	}
	for typ, sets := range paramCases {
		for _, params := range sets {
			t.Run(fmt.Sprintf("%s/%s", typ, params), func(t *testing.T) {
				want, got := parseWith(t, linked, typ, params), parseWith(t, decl, typ, params)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("parameters %s of %s (-linked +declared):\n%s", params, typ, diff)
				}
			})
		}
	}
}

func parseWith(t *testing.T, cat *hints.Catalog, typ, params string) outcome {
	t.Helper()
	if p, ok := cat.Selection(typ); ok {
		return parsed(p.Parse(hints.Params(params)))
	}
	if p, ok := cat.Hint(typ); ok {
		return parsed(p.Parse(hints.Params(params)))
	}
	t.Fatalf("type %s is not in the catalog", typ)
	return outcome{}
}

func hostList(hs []hints.HintHost) string {
	var b bytes.Buffer
	for i, h := range hs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(h.String())
	}
	return b.String()
}

// TestBuiltinDeclarationCompilesAlike runs the compile step on whole
// policy files with the linked catalog and with the declared one: every
// problem (reason, place, key, message) and the compiled file are the
// same.
func TestBuiltinDeclarationCompilesAlike(t *testing.T) {
	linked := builtin.NewCatalog()
	decl := loadFile(t, builtinDeclaration).Catalog
	for name, doc := range map[string]string{
		"defaults":          "worker_selection:\n  decode: {type: kvcr}\n  prefill: {type: dynamo-default-cost-fn}\n",
		"listed":            "worker_selection:\n  decode:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.3}\n    hints:\n      - {type: kv-fetch, parameters: {min_blocks: 2}}\n      - {type: kv-retain, parameters: {ttl_seconds: 30}}\n",
		"two senders":       "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n      - {type: kv-fetch}\n      - {type: kv-fetch, name: second}\n",
		"no sender":         "worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-retain}]\n",
		"unused sender":     "worker_selection:\n  decode:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0}\n    hints: [{type: kv-fetch}]\n",
		"unknown hint":      "worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}, {type: harness_prefetch}]\n",
		"unknown selection": "worker_selection:\n  decode: {type: dynamo-kv-magic}\n",
		"bad params":        "worker_selection:\n  decode:\n    type: dynamo-two-tier-cost-fn\n    parameters: {cache_threshold: 2}\n    hints:\n      - {type: kv-retain, parameters: {ttl_seconds: 0}}\n      - {type: kv-evict, parameters: {x: 1}}\n",
		"non-kv":            "worker_selection:\n  decode:\n    type: dynamo-round-robin\n    hints: [{type: kv-evict}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := hintsconfig.ParseConfig([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			modes := hintsconfig.Modes{}
			if name == "non-kv" {
				modes.Default = hintsconfig.ModeRoundRobin
			}
			gl, pl := hintsconfig.Compile(linked, cfg, modes)
			cfg2, _ := hintsconfig.ParseConfig([]byte(doc))
			gd, pd := hintsconfig.Compile(decl, cfg2, modes)
			if diff := cmp.Diff(pl, pd); diff != "" {
				t.Errorf("problems (-linked +declared):\n%s", diff)
			}
			if len(pl) == 0 && name != "defaults" && name != "listed" {
				t.Errorf("case %s found no problem; it is meant to", name)
			}
			ml, _, errL := gl.Encode()
			md, _, errD := gd.Encode()
			if errL != nil || errD != nil {
				t.Fatalf("marshal: %v, %v", errL, errD)
			}
			if diff := cmp.Diff(string(ml), string(md)); diff != "" {
				t.Errorf("compiled file (-linked +declared):\n%s", diff)
			}
		})
	}
}
