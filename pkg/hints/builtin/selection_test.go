package builtin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// selCase is one row of a worker-selection parameter table: the parameters
// and either what the parsed policy reports and commits, or the words of
// the error.
type selCase struct {
	name    string
	params  string
	want    string // reported parameters, JSON; compared as values, not bytes
	commits bool
	errKey  string
	errWord string
}

func runSelectionCases(t *testing.T, typ string, cases []selCase) {
	t.Helper()
	p, ok := builtin.NewCatalog().Selection(typ)
	if !ok {
		t.Fatalf("%s is not registered", typ)
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			pol, err := p.Parse(hints.Params(tt.params))
			checkParamResult(t, err, paramCase{params: tt.params, errKey: tt.errKey, errWord: tt.errWord})
			if err != nil {
				return
			}
			if pol.CommitsKVCopies() != tt.commits {
				t.Errorf("CommitsKVCopies = %v, want %v", pol.CommitsKVCopies(), tt.commits)
			}
			rep, reports := pol.(hints.ParameterReporter)
			if tt.want == "" {
				if reports {
					t.Errorf("%T reports parameters %s; this type takes none", pol, mustJSON(t, rep.EffectiveParameters()))
				}
				return
			}
			if !reports {
				t.Fatalf("%T does not report its parameters", pol)
			}
			got := string(mustJSON(t, rep.EffectiveParameters()))
			if diff := cmp.Diff(jsonValue(t, tt.want), jsonValue(t, got), sameNumber); diff != "" {
				t.Errorf("reported parameters %s (-want +got):\n%s", got, diff)
			}
		})
	}
}

// sameNumber compares JSON numbers by value, exactly: 1e300 is 1e+300,
// and 18446744073709551615 is not 18446744073709551616.
var sameNumber = cmp.Comparer(func(a, b json.Number) bool {
	ra, okA := new(big.Rat).SetString(string(a))
	rb, okB := new(big.Rat).SetString(string(b))
	return okA && okB && ra.Cmp(rb) == 0
})

// jsonValue decodes a JSON document with its numbers as written, so that
// 18446744073709551615 stays exact.
func jsonValue(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// costFloatKeys are the parameters of dynamo-default-cost-fn and kvcr that
// are finite and non-negative, with no upper bound.
var costFloatKeys = []string{
	"overlap_score_credit", "overlap_score_credit_decay", "prefill_load_scale",
	"decode_active_request_weight", "host_cache_hit_weight", "disk_cache_hit_weight",
	"router_temperature",
}

// costCases are the rows dynamo-default-cost-fn and kvcr share. reported
// turns the keys a row sets, as JSON members, into what the policy must
// report; commits says whether it commits copies for a given
// shared_cache_multiplier (nil: not set).
func costCases(reported func(members string) string, commits func(shared *float64) bool, capped bool) []selCase {
	f := func(v float64) *float64 { return &v }
	ok := func(name, params, members string, shared *float64) selCase {
		return selCase{name: name, params: params, want: reported(members), commits: commits(shared)}
	}
	// kvcr, kvhint's own, keeps shared_cache_multiplier in [0,1].
	belowZero := "-0.1 is below the minimum 0"
	aboveOne := ok("shared_cache_multiplier above 1, as Dynamo's provider takes it", `{"shared_cache_multiplier": 1.5}`, `"shared_cache_multiplier": 1.5`, f(1.5))
	if capped {
		belowZero = "-0.1 is out of range 0..1"
		aboveOne = selCase{name: "shared_cache_multiplier above 1", params: `{"shared_cache_multiplier": 1.0001}`, errKey: "shared_cache_multiplier", errWord: "1.0001 is out of range 0..1"}
	}
	cases := []selCase{
		ok("nothing set", "", "", nil),
		ok("empty mapping", "{}", "", nil),
		ok("null", "null", "", nil),
		ok("every key set",
			`{"overlap_score_credit": 2, "overlap_score_credit_decay": 0.1, "prefill_load_scale": 1.5, "decode_active_request_weight": 0.2,
			  "host_cache_hit_weight": 0.75, "disk_cache_hit_weight": 0.25, "shared_cache_multiplier": 0.3, "router_temperature": 0.7, "seed": 42}`,
			`"overlap_score_credit": 2, "overlap_score_credit_decay": 0.1, "prefill_load_scale": 1.5, "decode_active_request_weight": 0.2,
			 "host_cache_hit_weight": 0.75, "disk_cache_hit_weight": 0.25, "shared_cache_multiplier": 0.3, "router_temperature": 0.7, "seed": 42`, f(0.3)),
		ok("a value equal to Dynamo's default is still reported: it was set", `{"overlap_score_credit": 1}`, `"overlap_score_credit": 1`, nil),
		// shared_cache_multiplier is finite and >= 0: Dynamo's provider has
		// no upper bound (above 1 is a warning, TestDefaultCostFnWarnsAboveOne).
		{name: "shared_cache_multiplier below 0", params: `{"shared_cache_multiplier": -0.1}`, errKey: "shared_cache_multiplier", errWord: belowZero},
		ok("shared_cache_multiplier at 0", `{"shared_cache_multiplier": 0}`, `"shared_cache_multiplier": 0`, f(0)),
		ok("shared_cache_multiplier just above 0", `{"shared_cache_multiplier": 1e-9}`, `"shared_cache_multiplier": 1e-9`, f(1e-9)),
		ok("shared_cache_multiplier at 1", `{"shared_cache_multiplier": 1}`, `"shared_cache_multiplier": 1`, f(1)),
		aboveOne,
		{name: "shared_cache_multiplier infinite", params: `{"shared_cache_multiplier": 1e400}`, errKey: "shared_cache_multiplier", errWord: "is not a number"},
		{name: "shared_cache_multiplier a string", params: `{"shared_cache_multiplier": "0.5"}`, errKey: "shared_cache_multiplier", errWord: "is not a number"},
		// seed is an unsigned 64-bit integer.
		ok("seed 0", `{"seed": 0}`, `"seed": 0`, nil),
		ok("seed at the u64 maximum", `{"seed": 18446744073709551615}`, `"seed": 18446744073709551615`, nil),
		{name: "seed above the u64 maximum", params: `{"seed": 18446744073709551616}`, errKey: "seed", errWord: "18446744073709551616 is out of range: at most 18446744073709551615"},
		{name: "seed -1", params: `{"seed": -1}`, errKey: "seed", errWord: "-1 is not a non-negative integer"},
		{name: "seed 1.5", params: `{"seed": 1.5}`, errKey: "seed", errWord: "invalid type: floating point `1.5`, expected u64"},
		{name: "seed 1.0, a float", params: `{"seed": 1.0}`, errKey: "seed", errWord: "invalid type: floating point `1`, expected u64"},
		{name: "seed a string", params: `{"seed": "7"}`, errKey: "seed", errWord: "is not a non-negative integer"},
		// Removed and unknown keys.
		{name: "overlap_score_weight is gone", params: `{"overlap_score_weight": 1}`, errKey: "overlap_score_weight", errWord: "unknown parameter; known: decode_active_request_weight"},
		{name: "temperature is gone", params: `{"temperature": 0.5}`, errKey: "temperature", errWord: "unknown parameter"},
		{name: "an unknown key", params: `{"cache_threshold": 0.5}`, errKey: "cache_threshold", errWord: "unknown parameter"},
		ok("null for a key leaves it unset, as Dynamo's Option reads it", `{"router_temperature": null}`, "", nil),
		{name: "not a mapping", params: `[1]`, errWord: "must be a mapping"},
	}
	for _, key := range costFloatKeys {
		cases = append(cases,
			selCase{name: key + " below 0", params: fmt.Sprintf(`{%q: -0.5}`, key), errKey: key, errWord: "-0.5 is below the minimum 0"},
			ok(key+" at 0", fmt.Sprintf(`{%q: 0}`, key), fmt.Sprintf(`%q: 0`, key), nil),
			ok(key+" far above 0", fmt.Sprintf(`{%q: 1e300}`, key), fmt.Sprintf(`%q: 1e300`, key), nil),
			selCase{name: key + " +infinity", params: fmt.Sprintf(`{%q: 1e400}`, key), errKey: key, errWord: "1e400 is not a number"},
			selCase{name: key + " -infinity", params: fmt.Sprintf(`{%q: -1e400}`, key), errKey: key, errWord: "-1e400 is not a number"},
			selCase{name: key + " NaN as YAML spells it", params: fmt.Sprintf(`{%q: ".nan"}`, key), errKey: key, errWord: "is not a number"},
			selCase{name: key + " a boolean", params: fmt.Sprintf(`{%q: true}`, key), errKey: key, errWord: "true is not a number"},
		)
	}
	return cases
}

func TestDefaultCostFnParameters(t *testing.T) {
	runSelectionCases(t, builtin.TypeDefaultCostFn, costCases(
		// Only what was set: the router fills the rest from its flags.
		func(members string) string { return "{" + members + "}" },
		// Never, whatever shared_cache_multiplier says.
		func(*float64) bool { return false },
		false,
	))
}

func TestKVCRParameters(t *testing.T) {
	runSelectionCases(t, builtin.TypeKVCR, costCases(
		// What was set, and the effective shared_cache_multiplier always.
		func(members string) string {
			if strings.Contains(members, "shared_cache_multiplier") {
				return "{" + members + "}"
			}
			if members == "" {
				return `{"shared_cache_multiplier": 0.5}`
			}
			return "{" + members + `, "shared_cache_multiplier": 0.5}`
		},
		// Exactly when shared_cache_multiplier, 0.5 unless set, is above 0.
		func(shared *float64) bool { return shared == nil || *shared > 0 },
		true,
	))
}

func TestTwoTierCostFnParameters(t *testing.T) {
	runSelectionCases(t, builtin.TypeTwoTierCostFn, []selCase{
		{name: "nothing set", params: "", want: `{}`},
		{name: "empty mapping", params: `{}`, want: `{}`},
		{name: "every threshold set", params: `{"cache_threshold": 0.8, "balance_abs_threshold": 16, "balance_rel_threshold": 1.5}`,
			want: `{"cache_threshold": 0.8, "balance_abs_threshold": 16, "balance_rel_threshold": 1.5}`},
		// cache_threshold is in [0, 1].
		{name: "cache_threshold below 0", params: `{"cache_threshold": -0.01}`, errKey: "cache_threshold", errWord: "-0.01 is out of range 0..1"},
		{name: "cache_threshold at 0", params: `{"cache_threshold": 0}`, want: `{"cache_threshold": 0}`},
		{name: "cache_threshold at 1", params: `{"cache_threshold": 1}`, want: `{"cache_threshold": 1}`},
		{name: "cache_threshold above 1", params: `{"cache_threshold": 1.01}`, errKey: "cache_threshold", errWord: "1.01 is out of range 0..1"},
		{name: "cache_threshold infinite", params: `{"cache_threshold": 1e400}`, errKey: "cache_threshold", errWord: "is not a number"},
		{name: "cache_threshold a string", params: `{"cache_threshold": "0.5"}`, errKey: "cache_threshold", errWord: "is not a number"},
		// balance_abs_threshold is a non-negative integer.
		{name: "balance_abs_threshold -1", params: `{"balance_abs_threshold": -1}`, errKey: "balance_abs_threshold", errWord: "-1 is not a non-negative integer"},
		{name: "balance_abs_threshold at 0", params: `{"balance_abs_threshold": 0}`, want: `{"balance_abs_threshold": 0}`},
		{name: "balance_abs_threshold at the u64 maximum", params: `{"balance_abs_threshold": 18446744073709551615}`, want: `{"balance_abs_threshold": 18446744073709551615}`},
		{name: "balance_abs_threshold fractional", params: `{"balance_abs_threshold": 32.5}`, errKey: "balance_abs_threshold", errWord: "invalid type: floating point `32.5`, expected u64"},
		{name: "balance_abs_threshold a whole float", params: `{"balance_abs_threshold": 32.0}`, errKey: "balance_abs_threshold", errWord: "invalid type: floating point `32`, expected u64"},
		{name: "balance_abs_threshold a string", params: `{"balance_abs_threshold": "32"}`, errKey: "balance_abs_threshold", errWord: "is not a non-negative integer"},
		// balance_rel_threshold is at least 1.
		{name: "balance_rel_threshold below 1", params: `{"balance_rel_threshold": 0.99}`, errKey: "balance_rel_threshold", errWord: "0.99 is below the minimum 1"},
		{name: "balance_rel_threshold negative", params: `{"balance_rel_threshold": -2}`, errKey: "balance_rel_threshold", errWord: "-2 is below the minimum 1"},
		{name: "balance_rel_threshold at 1", params: `{"balance_rel_threshold": 1}`, want: `{"balance_rel_threshold": 1}`},
		{name: "balance_rel_threshold far above 1", params: `{"balance_rel_threshold": 1e300}`, want: `{"balance_rel_threshold": 1e300}`},
		{name: "balance_rel_threshold infinite", params: `{"balance_rel_threshold": 1e400}`, errKey: "balance_rel_threshold", errWord: "is not a number"},
		{name: "balance_rel_threshold NaN as YAML spells it", params: `{"balance_rel_threshold": ".nan"}`, errKey: "balance_rel_threshold", errWord: "is not a number"},
		// adaptive is a mapping of its own, as strict.
		{name: "adaptive empty: on, with Dynamo's defaults", params: `{"adaptive": {}}`, want: `{"adaptive": {}}`},
		{name: "adaptive set", params: `{"adaptive": {"update_interval_ms": 250, "load_scale": 8}}`, want: `{"adaptive": {"update_interval_ms": 250, "load_scale": 8}}`},
		{name: "update_interval_ms 0", params: `{"adaptive": {"update_interval_ms": 0}}`, errKey: "adaptive.update_interval_ms", errWord: "must be above 0"},
		{name: "update_interval_ms 1", params: `{"adaptive": {"update_interval_ms": 1}}`, want: `{"adaptive": {"update_interval_ms": 1}}`},
		{name: "update_interval_ms -1", params: `{"adaptive": {"update_interval_ms": -1}}`, errKey: "adaptive.update_interval_ms", errWord: "-1 is not a non-negative integer"},
		{name: "update_interval_ms fractional", params: `{"adaptive": {"update_interval_ms": 1.5}}`, errKey: "adaptive.update_interval_ms", errWord: "invalid type: floating point `1.5`, expected u64"},
		{name: "update_interval_ms 100.0", params: `{"adaptive": {"update_interval_ms": 100.0}}`, errKey: "adaptive.update_interval_ms", errWord: "invalid type: floating point `100`, expected u64"},
		{name: "load_scale below 1", params: `{"adaptive": {"load_scale": 0.5}}`, errKey: "adaptive.load_scale", errWord: "0.5 is below the minimum 1"},
		{name: "load_scale at 1", params: `{"adaptive": {"load_scale": 1}}`, want: `{"adaptive": {"load_scale": 1}}`},
		{name: "load_scale infinite", params: `{"adaptive": {"load_scale": 1e400}}`, errKey: "adaptive.load_scale", errWord: "is not a number"},
		{name: "load_scale a string", params: `{"adaptive": {"load_scale": "32"}}`, errKey: "adaptive.load_scale", errWord: "is not a number"},
		{name: "an unknown key in adaptive", params: `{"adaptive": {"interval_ms": 100}}`, errKey: "adaptive.interval_ms",
			errWord: "unknown parameter; known: load_scale, update_interval_ms"},
		{name: "adaptive not a mapping", params: `{"adaptive": true}`, errKey: "adaptive", errWord: "true is not a mapping"},
		{name: "adaptive null is unset (an Option)", params: `{"adaptive": null}`, want: `{}`},
		{name: "cache_threshold null is refused (a plain f64 with a default)", params: `{"cache_threshold": null}`, errKey: "cache_threshold", errWord: "must not be null"},
		// adaptive cannot be combined with non-default thresholds.
		{name: "adaptive with a non-default cache_threshold", params: `{"adaptive": {}, "cache_threshold": 0.8}`, errKey: "adaptive",
			errWord: "cannot be combined with non-default thresholds: cache_threshold 0.8 (default 0.5)"},
		{name: "adaptive with every threshold changed", params: `{"adaptive": {}, "cache_threshold": 0.4, "balance_abs_threshold": 8, "balance_rel_threshold": 2}`,
			errKey: "adaptive", errWord: "cache_threshold 0.4 (default 0.5), balance_abs_threshold 8 (default 32), balance_rel_threshold 2 (default 1.1)"},
		{name: "adaptive with a non-default balance_abs_threshold", params: `{"adaptive": {"load_scale": 4}, "balance_abs_threshold": 0}`, errKey: "adaptive",
			errWord: "balance_abs_threshold 0 (default 32)"},
		{name: "adaptive with the default thresholds written out", params: `{"adaptive": {}, "cache_threshold": 0.5, "balance_abs_threshold": 32, "balance_rel_threshold": 1.1}`,
			want: `{"adaptive": {}, "cache_threshold": 0.5, "balance_abs_threshold": 32, "balance_rel_threshold": 1.1}`},
		// Dynamo's rejects_an_unknown_parameter_key fixture.
		{name: "cache_affinity_threshold is unknown", params: `{"cache_affinity_threshold": 0.8}`, errKey: "cache_affinity_threshold",
			errWord: `parameter "cache_affinity_threshold": unknown parameter; known: adaptive, balance_abs_threshold, balance_rel_threshold, cache_threshold`},
		{name: "a cost-fn key is unknown here", params: `{"overlap_score_credit": 1}`, errKey: "overlap_score_credit", errWord: "unknown parameter"},
		{name: "not a mapping", params: `0.5`, errWord: "must be a mapping"},
	})
}

func TestLoadOnlySelections(t *testing.T) {
	cases := []selCase{
		{name: "nothing set", params: ""},
		{name: "empty mapping", params: `{}`},
		{name: "null", params: `null`},
		// Dynamo's fixture: seed under dynamo-round-robin fails naming seed.
		{name: "seed is refused", params: `{"seed": 7}`, errKey: "seed", errWord: `parameter "seed": unknown parameter; this type takes no parameters`},
		{name: "any key is refused", params: `{"choices": 3}`, errKey: "choices", errWord: "takes no parameters"},
		{name: "a cost-fn key is refused", params: `{"router_temperature": 0}`, errKey: "router_temperature", errWord: "takes no parameters"},
		{name: "not a mapping", params: `[]`, errWord: "must be a mapping"},
	}
	for _, typ := range []string{builtin.TypeRoundRobin, builtin.TypeRandom, builtin.TypePowerOfTwoChoices,
		builtin.TypeLeastLoaded, builtin.TypeDirect, builtin.TypeDeviceAwareWeighted} {
		t.Run(typ, func(t *testing.T) { runSelectionCases(t, typ, cases) })
	}
}

// TestSoftAffinityLoadGuardParameters holds dynamo-soft-affinity-load-guard
// to Dynamo's own (lib/router-plugins/builtin/src/soft_affinity_load_guard.rs
// and the tests of lib/router-plugins/builtin/src/lib.rs): both keys
// optional usize, move_margin at least 1, any other key refused by name.
func TestSoftAffinityLoadGuardParameters(t *testing.T) {
	runSelectionCases(t, builtin.TypeSoftAffinityLoadGuard, []selCase{
		// resolves_soft_affinity_load_guard_without_parameters.
		{name: "no parameters", params: ``, want: `{}`},
		{name: "an empty mapping", params: `{}`, want: `{}`},
		// resolves_documented_soft_affinity_load_guard_yaml.
		{name: "max_active_requests 32, as Dynamo's documented instance", params: `{"max_active_requests": 32}`, want: `{"max_active_requests": 32}`},
		{name: "both set", params: `{"max_active_requests": 7, "move_margin": 3}`, want: `{"max_active_requests": 7, "move_margin": 3}`},
		{name: "max_active_requests 0 keeps a binding only on an idle worker", params: `{"max_active_requests": 0}`, want: `{"max_active_requests": 0}`},
		{name: "move_margin at its minimum", params: `{"move_margin": 1}`, want: `{"move_margin": 1}`},
		{name: "max_active_requests at the u64 maximum", params: `{"max_active_requests": 18446744073709551615}`, want: `{"max_active_requests": 18446744073709551615}`},
		{name: "move_margin at the usize maximum", params: `{"move_margin": 18446744073709551615}`, want: `{"move_margin": 18446744073709551615}`},
		{name: "move_margin 2.0, a float", params: `{"move_margin": 2.0}`, errKey: "move_margin", errWord: "invalid type: floating point `2`, expected u64"},
		// rejects_a_zero_move_margin: "move_margin must be at least 1".
		{name: "move_margin 0", params: `{"move_margin": 0}`, errKey: "move_margin", errWord: "0 is below the minimum 1"},
		{name: "move_margin negative", params: `{"move_margin": -1}`, errKey: "move_margin", errWord: "-1 is not a non-negative integer"},
		{name: "max_active_requests negative", params: `{"max_active_requests": -1}`, errKey: "max_active_requests", errWord: "-1 is not a non-negative integer"},
		{name: "max_active_requests fractional", params: `{"max_active_requests": 1.5}`, errKey: "max_active_requests", errWord: "invalid type: floating point `1.5`, expected u64"},
		// rejects_an_unknown_soft_affinity_load_guard_parameter.
		{name: "a key of another policy", params: `{"group_idle_ttl_secs": 300}`, errKey: "group_idle_ttl_secs",
			errWord: `parameter "group_idle_ttl_secs": unknown parameter; known: max_active_requests, move_margin`},
	})
}

// TestDefaultCostFnWarnsAboveOne: Dynamo's provider takes a
// shared_cache_multiplier above 1 (it checks finite and >= 0 only), so it is
// a warning, named by its key, not a refusal; at 1 and below, none.
func TestDefaultCostFnWarnsAboveOne(t *testing.T) {
	p, _ := builtin.NewCatalog().Selection(builtin.TypeDefaultCostFn)
	for _, tt := range []struct {
		params string
		warn   bool
	}{{`{"shared_cache_multiplier": 1}`, false}, {`{"shared_cache_multiplier": 0.5}`, false}, {`{}`, false}, {`{"shared_cache_multiplier": 1.5}`, true}} {
		pol, err := p.Parse(hints.Params(tt.params))
		if err != nil {
			t.Fatalf("Parse(%s): %v", tt.params, err)
		}
		var got []*hints.ParamError
		if w, ok := pol.(hints.ParameterWarner); ok {
			got = w.ParameterWarnings()
		}
		if (len(got) > 0) != tt.warn || (tt.warn && got[0].Key != "shared_cache_multiplier") {
			t.Errorf("Parse(%s) warnings = %v, want a warning: %v", tt.params, got, tt.warn)
		}
	}
}
