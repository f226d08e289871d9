package hintsconfig_test

import (
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// dynamoRule is one case of a rule a released Dynamo Frontend applies to
// its policy file (the reference page "What Dynamo's own code checks in a
// policy file"), held against kvhint's dynamo target and against the
// model of Dynamo written apart from it (internal/testing/dynamopolicy).
type dynamoRule struct {
	name string // rule/direction
	doc  string
	// want: words of kvhint's refusal; "" accepts.
	want string
	// model: words of the model's refusal where they are Dynamo's; empty
	// only checks that the model refuses too.
	model string
	// warn: words of a warning kvhint must give on an accepted file.
	warn string
	// mode: the router mode of every role; empty is kv.
	mode hintsconfig.RouterMode
	// declared: the catalog is the router's declared catalog, which links
	// kvhint's types (kvcr, kv-retain, ...) into the Frontend's build.
	declared bool
	// productOnly: kvhint refuses on purpose where Dynamo would start;
	// the model accepts.
	productOnly bool
}

// profile is a root profile with one family and buckets, whose class
// fields are extra.
func profile(class string) string {
	return "default_policy_family: standard\nuncached_isl_buckets:\n  - {min_tokens: 0, bucket: all}\npolicy_classes:\n  - {name: c1, policy_family: standard, cache_bucket: all, quantum: 4" + class + "}\n"
}

func instance(typ, params string) string {
	if params != "" {
		params = ", parameters: " + params
	}
	return "worker_selection:\n  decode: x\n  instances:\n    - {name: x, type: " + typ + params + "}\n"
}

var dynamoRules = []dynamoRule{
	// Root: deny_unknown_fields; at least one thing defined.
	{name: "root_unknown_key/refuses", doc: "router_mode: kv\nworker_selection:\n  decode: default\n", want: `unknown key "router_mode"`, model: "unknown field `router_mode`"},
	{name: "root_unknown_key/accepts_known", doc: "worker_selection:\n  decode: default\n"},
	{name: "must_define/refuses_empty", doc: "{}\n", want: "must define", model: "must define"},
	{name: "must_define/refuses_null_document", doc: "# nothing\n", want: "must be a mapping", model: "must define"},
	{name: "must_define/accepts_kv_hint_policy_alone", doc: "kv_hint_policy:\n  type: kv-retain\n", declared: true},
	{name: "must_define/accepts_router_alone", doc: "router:\n  router_temperature: 0.5\n"},

	// The router block: KvRouterConfig's fields, each of its type.
	{name: "router_block/accepts_typed_settings", doc: "router:\n  overlap_score_credit: 2\n  shared_cache_multiplier: 0.5\n  use_kv_events: false\n  router_event_threads: 8\n  router_queue_policy: wspt\n  router_queue_threshold: null\nworker_selection:\n  decode: default\n"},
	{name: "router_block/refuses_unknown_setting", doc: "router:\n  temperature: 0.5\n", want: "unknown router setting", model: "unknown router setting"},
	{name: "router_block/refuses_float_for_integer", doc: "router:\n  router_event_threads: 4.0\n", want: "invalid type: floating point `4`, expected u32", model: "invalid type: floating point `4`, expected u32"},
	{name: "router_block/refuses_string_for_bool", doc: "router:\n  use_kv_events: 'yes'\n", want: "expected a boolean", model: "expected a boolean"},

	// The root profile.
	{name: "root_profile_all_or_none/accepts_full", doc: profile("")},
	{name: "root_profile_all_or_none/refuses_partial", doc: "policy_classes:\n  - {name: c1, quantum: 1}\nworker_selection:\n  decode: default\n",
		want: "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present", model: "root profile must specify"},
	{name: "root_profile_identifiers/accepts_dots_and_dashes", doc: strings.ReplaceAll(profile(""), "c1", "c.1-a_b")},
	{name: "root_profile_identifiers/refuses_space", doc: strings.ReplaceAll(profile(""), "c1", "'c 1'"), want: `must match [A-Za-z0-9_.-]+`, model: `must match [A-Za-z0-9_.-]+`},
	{name: "root_profile_classes/refuses_empty", doc: "default_policy_family: standard\nuncached_isl_buckets: [{min_tokens: 0, bucket: all}]\npolicy_classes: []\n", want: "policy_classes must not be empty", model: "policy_classes must not be empty"},
	{name: "root_profile_classes/refuses_duplicate_names", doc: profile("") + "  - {name: c1, quantum: 1}\n", want: `duplicate policy class "c1"`, model: `duplicate policy class "c1"`},
	{name: "root_profile_classes/accepts_an_explicit_class", doc: profile("") + "  - {name: c2, quantum: 1}\n"},
	{name: "root_profile_quantum/refuses_zero", doc: strings.Replace(profile(""), "quantum: 4", "quantum: 0", 1), want: "quantum must be greater than zero", model: "quantum must be greater than zero"},
	{name: "root_profile_quantum/refuses_float", doc: strings.Replace(profile(""), "quantum: 4", "quantum: 1.0", 1), want: "invalid type: floating point `1`, expected usize", model: "invalid type: floating point `1`, expected usize"},
	{name: "root_profile_quantum/accepts_usize_max", doc: strings.Replace(profile(""), "quantum: 4", "quantum: 18446744073709551615", 1)},
	{name: "root_profile_quantum/refuses_above_usize", doc: strings.Replace(profile(""), "quantum: 4", "quantum: 18446744073709551616", 1), want: "expected usize"},
	{name: "root_profile_queue_policy/accepts_wspt", doc: profile(", queue_policy: wspt")},
	{name: "root_profile_queue_policy/refuses_lcfs", doc: profile(", queue_policy: lcfs"), want: "queue_policy must be fcfs or wspt", model: "queue_policy must be fcfs or wspt"},
	{name: "root_profile_queue_policy/refuses_unknown", doc: profile(", queue_policy: fifo"), want: "unknown variant `fifo`", model: "unknown variant"},
	{name: "root_profile_busy_frac/accepts_16", doc: profile(", prefill_busy_threshold_frac: 16.0")},
	{name: "root_profile_busy_frac/refuses_negative", doc: profile(", prefill_busy_threshold_frac: -1"), want: "prefill_busy_threshold_frac must be finite and non-negative", model: "must be finite and non-negative"},
	{name: "root_profile_busy_frac/refuses_inf", doc: profile(", prefill_busy_threshold_frac: .inf"), want: "not a finite number", model: "finite"},
	{name: "root_profile_busy_frac/null_is_unset", doc: profile(", prefill_busy_threshold_frac: null")},
	{name: "root_profile_family_and_bucket/refuses_family_alone", doc: profile("") + "  - {name: c2, policy_family: standard, quantum: 1}\n", want: "must specify both policy_family and cache_bucket or neither", model: "both policy_family and cache_bucket"},
	{name: "root_profile_buckets/refuses_start_above_0", doc: "default_policy_family: s\nuncached_isl_buckets: [{min_tokens: 1, bucket: a}]\npolicy_classes: [{name: c, policy_family: s, cache_bucket: a, quantum: 1}]\n", want: "uncached_isl_buckets must start at min_tokens 0", model: "must start at min_tokens 0"},
	{name: "root_profile_buckets/refuses_not_increasing", doc: "default_policy_family: s\nuncached_isl_buckets: [{min_tokens: 0, bucket: a}, {min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, policy_family: s, cache_bucket: a, quantum: 1}, {name: d, policy_family: s, cache_bucket: b, quantum: 1}]\n", want: "min_tokens must be strictly increasing", model: "strictly increasing"},
	{name: "root_profile_buckets/refuses_duplicate_name", doc: "default_policy_family: s\nuncached_isl_buckets: [{min_tokens: 0, bucket: a}, {min_tokens: 8, bucket: a}]\npolicy_classes: [{name: c, policy_family: s, cache_bucket: a, quantum: 1}]\n", want: `duplicate cache bucket "a"`, model: "duplicate cache bucket"},
	{name: "root_profile_buckets/accepts_two", doc: "default_policy_family: s\nuncached_isl_buckets: [{min_tokens: 0, bucket: a}, {min_tokens: 8, bucket: b}]\npolicy_classes: [{name: c, policy_family: s, cache_bucket: a, quantum: 1}, {name: d, policy_family: s, cache_bucket: b, quantum: 1}]\n"},
	{name: "root_profile_default_family/refuses_missing", doc: strings.Replace(profile(""), "default_policy_family: standard", "default_policy_family: other", 1), want: `default_policy_family "other" does not name a configured family`, model: "does not name a configured family"},
	{name: "root_profile_family_bucket_complete/refuses_gap", doc: "default_policy_family: s\nuncached_isl_buckets: [{min_tokens: 0, bucket: a}, {min_tokens: 8, bucket: b}]\npolicy_classes: [{name: c, policy_family: s, cache_bucket: a, quantum: 1}]\n", want: `is missing a policy class for family "s" and bucket "b"`, model: "is missing a policy class"},
	{name: "models/accepts_full_profile", doc: "models:\n  m1:\n" + indent(profile(""))},
	{name: "models/refuses_partial_profile", doc: "models:\n  m1:\n    default_policy_family: s\n", want: "missing field `policy_classes`", model: "missing field"},
	{name: "models/refuses_empty_name", doc: "models:\n  '':\n" + indent(profile("")), want: "model profile name must not be empty", model: "model profile name must not be empty"},

	// worker_selection.
	{name: "worker_selection_role/refuses_mapping", doc: "worker_selection:\n  decode: {type: dynamo-random}\n", want: "invalid type: map, expected a string", model: "invalid type: map, expected a string"},
	{name: "worker_selection_role/refuses_bare_type", doc: "worker_selection:\n  decode: dynamo-random\n", want: "does not name a configured instance", model: "does not name a configured instance"},
	{name: "worker_selection_role/accepts_default", doc: "worker_selection:\n  decode: default\n"},
	{name: "worker_selection_role/null_is_unset", doc: "worker_selection:\n  decode: default\n  prefill: null\n"},
	{name: "worker_selection/refuses_empty", doc: "worker_selection: {}\n", want: "worker_selection is empty", model: "worker_selection must define an instance"},
	{name: "worker_selection/refuses_unknown_role", doc: "worker_selection:\n  chat: default\n", want: "chat", model: "unknown field `chat`"},
	{name: "instances/refuses_name_default", doc: "worker_selection:\n  instances: [{name: default, type: dynamo-random}]\n", want: "reserved", model: "reserved"},
	{name: "instances/refuses_duplicate_name", doc: "worker_selection:\n  instances: [{name: a, type: dynamo-random}, {name: a, type: dynamo-direct}]\n", want: "already used", model: `duplicate instance "a"`},
	{name: "instances/refuses_bad_identifier", doc: "worker_selection:\n  instances: [{name: 'a b', type: dynamo-random}]\n", want: "must be made of letters", model: "not a valid identifier"},
	{name: "instances/refuses_null_parameters", doc: "worker_selection:\n  instances: [{name: a, type: dynamo-random, parameters: null}]\n", want: "parameters must be a YAML mapping", model: "parameters must be a YAML mapping"},
	{name: "instances/refuses_unknown_field", doc: "worker_selection:\n  instances: [{name: a, type: dynamo-random, params: {}}]\n", want: `unknown key "params"`, model: "unknown field `params`"},
	{name: "instances/refuses_type_not_identifier", doc: "worker_selection:\n  instances: [{name: a, type: 'my type'}]\n", want: "valid identifier", model: "not a valid identifier"},
	{name: "kv_hint_policy/refuses_parameters_list", doc: "kv_hint_policy: {type: kv-retain, parameters: [1]}\n", declared: true, want: "must be a YAML mapping", model: "kv_hint_policy parameters must be a YAML mapping"},
	{name: "root_profile_busy_worker_ratio/accepts_with_threshold", doc: profile(", prefill_busy_threshold: 10, busy_worker_ratio: 0.95")},
	{name: "root_profile_busy_worker_ratio/refuses_above_1", doc: profile(", prefill_busy_threshold: 10, busy_worker_ratio: 16.0"), want: "busy_worker_ratio must be a finite fraction in (0.0, 1.0]", model: "busy_worker_ratio must be a finite fraction"},
	{name: "root_profile_busy_worker_ratio/refuses_without_threshold", doc: profile(", busy_worker_ratio: 0.5"), want: "so no worker can ever be considered busy", model: "so no worker can ever be considered busy"},
	{name: "root_profile_explicit_class/refuses_family_name", doc: profile("") + "  - {name: standard, quantum: 1}\n", want: `explicit policy class "standard" collides with a policy family`, model: "collides with a policy family"},
	{name: "root_profile_cache_bucket/refuses_unknown", doc: strings.Replace(profile(""), "cache_bucket: all", "cache_bucket: none", 1), want: `references unknown cache bucket "none"`, model: "references unknown cache bucket"},
	{name: "root_profile_class/refuses_unknown_field", doc: profile(", priority: 1"), want: "unknown field `priority`", model: "unknown field `priority`"},
	{name: "models/refuses_unknown_field", doc: "models:\n  m1:\n" + indent(profile("")) + "    router: {}\n", want: "unknown field `router`", model: "unknown field `router`"},
	{name: "instances/accepts_unselected", doc: "worker_selection:\n  instances: [{name: a, type: dynamo-random}]\n"},

	// request_classifier and kv_hint_policy: {type, parameters}; the type linked.
	{name: "request_classifier/refuses_stock_build", doc: "request_classifier: {type: by-length}\n", want: "no stock catalog registers a request classifier", model: "not linked"},
	{name: "request_classifier/accepts_declared_build", doc: "request_classifier: {type: by-length, parameters: {}}\n", declared: true, warn: "does not list request classifiers"},
	{name: "request_classifier/refuses_type_default", doc: "request_classifier: {type: default}\n", declared: true, want: "reserved", model: "reserved"},
	{name: "request_classifier/refuses_parameters_list", doc: "request_classifier: {type: a, parameters: [1]}\n", declared: true, want: "parameters must be a YAML mapping", model: "parameters must be a YAML mapping"},
	{name: "kv_hint_policy/refuses_stock_build", doc: "kv_hint_policy: {type: kv-retain}\n", want: "not linked into a stock Dynamo build", model: "not linked"},
	{name: "kv_hint_policy/accepts_declared_build", doc: "kv_hint_policy: {type: kv-retain, parameters: {ttl_seconds: 60}}\nworker_selection:\n  decode: default\n", declared: true},
	{name: "kv_hint_policy/refuses_type_default", doc: "kv_hint_policy: {type: default}\n", declared: true, want: "reserved", model: "reserved"},
	{name: "kv_hint_policy/refuses_unknown_field", doc: "kv_hint_policy: {type: kv-retain, name: x}\n", declared: true, want: `unknown key "name"`, model: "unknown field `name`"},
	{name: "kv_hint_policy/null_is_unset", doc: "kv_hint_policy: null\nworker_selection:\n  decode: default\n"},
	{name: "kv_hint_policy_needs_kv_mode/refuses_as_product_rule", doc: "kv_hint_policy: {type: kv-retain}\nworker_selection:\n  decode: default\n", declared: true, mode: hintsconfig.ModeRoundRobin,
		want: "kvhint's rule, not Dynamo's start-up check", productOnly: true},

	// YAML 1.2, as serde_yaml reads it.
	{name: "yaml12_scalars/accepts_instance_named_on", doc: "worker_selection:\n  decode: on\n  instances:\n    - {name: on, type: dynamo-random}\n"},
	{name: "yaml12_scalars/accepts_instance_named_yes", doc: "worker_selection:\n  decode: yes\n  instances:\n    - {name: yes, type: dynamo-random}\n"},
	{name: "yaml12_duplicate_keys/refuses", doc: "worker_selection:\n  decode: default\n  decode: default\n", want: "duplicate entry", model: "duplicate entry"},
	{name: "yaml12_documents/refuses_two", doc: "worker_selection:\n  decode: default\n---\nworker_selection:\n  decode: default\n", want: "more than one document", model: "more than one document"},

	// Selected instances: only of linked types, each parsed by its provider.
	{name: "selected_linked/refuses_kvcr_on_stock_build", doc: instance("kvcr", ""), want: `unknown worker-selection policy type "kvcr"; linked policy types:`, model: "unknown worker-selection policy type"},
	{name: "selected_linked/accepts_kvcr_on_declared_build", doc: instance("kvcr", "{shared_cache_multiplier: 0}"), declared: true},
	{name: "selected_linked/refuses_unknown_type", doc: instance("mine", ""), want: `unknown worker-selection policy type "mine"`, model: "unknown worker-selection policy type"},
	{name: "unselected_never_resolved/accepts_kvcr", doc: "worker_selection:\n  decode: default\n  instances: [{name: k, type: kvcr}]\n", warn: "no role selects it"},
	{name: "unselected_never_resolved/accepts_bad_parameters", doc: "worker_selection:\n  decode: default\n  instances: [{name: k, type: dynamo-two-tier-cost-fn, parameters: {cache_threshold: 7}}]\n", warn: "no role selects it"},
	{name: "selected_router_mode/refuses_custom_instance_off_kv", doc: instance("dynamo-round-robin", ""), mode: hintsconfig.ModeRoundRobin, want: "linked worker-selection policies require --router-mode kv", model: "linked worker-selection policies require --router-mode kv"},
	{name: "selected_router_mode/accepts_default_off_kv", doc: "worker_selection:\n  decode: default\n", mode: hintsconfig.ModeRoundRobin},

	// Numbers.
	{name: "integer_keys/refuse_float_seed", doc: instance("dynamo-default-cost-fn", "{seed: 1.0}"), want: "invalid type: floating point `1`, expected u64", model: "invalid type: floating point `1`, expected u64"},
	{name: "integer_keys/refuse_float_balance_abs_threshold", doc: instance("dynamo-two-tier-cost-fn", "{balance_abs_threshold: 32.0}"), want: "invalid type: floating point `32`, expected u64", model: "invalid type: floating point `32`, expected usize"},
	{name: "integer_keys/refuse_float_update_interval_ms", doc: instance("dynamo-two-tier-cost-fn", "{adaptive: {update_interval_ms: 100.0}}"), want: "invalid type: floating point `100`, expected u64", model: "invalid type: floating point `100`, expected u64"},
	{name: "integer_keys/refuse_float_max_active_requests", doc: instance("dynamo-soft-affinity-load-guard", "{max_active_requests: 32.0}"), want: "invalid type: floating point `32`", model: "invalid type: floating point `32`, expected usize"},
	{name: "integer_keys/refuse_float_move_margin", doc: instance("dynamo-soft-affinity-load-guard", "{move_margin: 2.0}"), want: "invalid type: floating point `2`", model: "invalid type: floating point `2`, expected usize"},
	{name: "integer_keys/accept_u64_max_seed", doc: instance("dynamo-default-cost-fn", "{seed: 18446744073709551615}")},
	{name: "integer_keys/accept_usize_max_move_margin", doc: instance("dynamo-soft-affinity-load-guard", "{move_margin: 18446744073709551615}")},
	{name: "non_finite/refuses_inf_cost_float", doc: instance("dynamo-default-cost-fn", "{overlap_score_credit: .inf}"), want: "not a finite number", model: "finite"},
	{name: "non_finite/refuses_nan_balance_rel_threshold", doc: instance("dynamo-two-tier-cost-fn", "{balance_rel_threshold: .nan}"), want: "not a finite number", model: "finite"},
	{name: "non_finite/refuses_inf_load_scale", doc: instance("dynamo-two-tier-cost-fn", "{adaptive: {load_scale: .inf}}"), want: "not a finite number", model: "finite"},
	{name: "null_optional/seed_is_unset", doc: instance("dynamo-default-cost-fn", "{seed: null}")},
	{name: "null_optional/adaptive_is_unset", doc: instance("dynamo-two-tier-cost-fn", "{adaptive: null, cache_threshold: 0.7}")},

	// The stock parameter structs.
	{name: "default_cost_fn/accepts_every_key", doc: instance("dynamo-default-cost-fn", "{overlap_score_credit: 2, overlap_score_credit_decay: 0.1, prefill_load_scale: 1.5, decode_active_request_weight: 0.2, host_cache_hit_weight: 0.75, disk_cache_hit_weight: 0.25, shared_cache_multiplier: 0.3, router_temperature: 0.7, seed: 42}")},
	{name: "default_cost_fn/refuses_negative", doc: instance("dynamo-default-cost-fn", "{router_temperature: -0.5}"), want: "below the minimum 0", model: "router_temperature"},
	{name: "default_cost_fn/refuses_unknown_key", doc: instance("dynamo-default-cost-fn", "{temperature: 0.5}"), want: "unknown parameter", model: "unknown field `temperature`"},
	{name: "default_cost_fn_shared_cache_multiplier/warns_above_1", doc: instance("dynamo-default-cost-fn", "{shared_cache_multiplier: 1.5}"), warn: "above 1"},
	{name: "two_tier/refuses_cache_threshold_above_1", doc: instance("dynamo-two-tier-cost-fn", "{cache_threshold: 1.5}"), want: "out of range 0..1", model: "cache_threshold"},
	{name: "two_tier/refuses_balance_rel_threshold_below_1", doc: instance("dynamo-two-tier-cost-fn", "{balance_rel_threshold: 0.9}"), want: "below the minimum 1", model: "balance_rel_threshold"},
	{name: "two_tier/refuses_update_interval_0", doc: instance("dynamo-two-tier-cost-fn", "{adaptive: {update_interval_ms: 0}}"), want: "above 0", model: "update_interval_ms"},
	{name: "two_tier/refuses_load_scale_below_1", doc: instance("dynamo-two-tier-cost-fn", "{adaptive: {load_scale: 0.5}}"), want: "below the minimum 1", model: "load_scale"},
	{name: "two_tier_adaptive/refuses_beside_non_default_threshold", doc: instance("dynamo-two-tier-cost-fn", "{cache_threshold: 0.7, adaptive: {}}"), want: "cannot be combined with non-default thresholds", model: "adaptive"},
	{name: "two_tier_adaptive/accepts_beside_default_thresholds", doc: instance("dynamo-two-tier-cost-fn", "{cache_threshold: 0.5, balance_abs_threshold: 32, balance_rel_threshold: 1.1, adaptive: {update_interval_ms: 250, load_scale: 8}}")},
	{name: "soft_affinity/refuses_move_margin_0", doc: instance("dynamo-soft-affinity-load-guard", "{move_margin: 0}"), want: "below the minimum 1", model: "move_margin"},
	{name: "soft_affinity/accepts_move_margin_1", doc: instance("dynamo-soft-affinity-load-guard", "{move_margin: 1, max_active_requests: 0}")},
	{name: "non_kv_types/refuse_parameters", doc: instance("dynamo-power-of-two-choices", "{k: 2}"), want: "this type takes no parameters", model: "unknown field `k`"},
	{name: "non_kv_types/accept_none", doc: instance("dynamo-device-aware-weighted", "{}")},
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// TestDynamoRules holds kvhint's dynamo target to every rule of Dynamo's
// own checks, in both directions, and to the model of Dynamo written apart
// from it: both accept what a released Frontend starts on and refuse what
// it does not, kvhint in Dynamo's words where Dynamo has them.
func TestDynamoRules(t *testing.T) {
	for _, tt := range dynamoRules {
		t.Run(tt.name, func(t *testing.T) {
			probs := checkDynamo(tt)
			errs := probs.Errors()
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Errorf("kvhint refused:\n%v", errs)
			case tt.want != "" && len(errs) == 0:
				t.Errorf("kvhint accepted; want a refusal saying %q (problems: %v)", tt.want, probs)
			case tt.want != "" && !strings.Contains(errs.Error(), tt.want):
				t.Errorf("kvhint's refusal does not say %q:\n%v", tt.want, errs)
			}
			if tt.warn != "" && !strings.Contains(probs.Warnings().Error(), tt.warn) {
				t.Errorf("kvhint gave no warning saying %q: %v", tt.warn, probs)
			}
			for _, p := range errs {
				if p.Line == 0 && tt.doc != "{}\n" && tt.doc != "# nothing\n" {
					t.Errorf("problem has no line: %v", p)
				}
			}
			err := dynamopolicy.CheckFrontend([]byte(tt.doc), frontendOf(tt))
			modelRefuses := tt.want != "" && !tt.productOnly
			switch {
			case !modelRefuses && err != nil:
				t.Errorf("the model refused, so kvhint and the model disagree: %v", err)
			case modelRefuses && err == nil:
				t.Errorf("the model accepted, so kvhint and the model disagree")
			case modelRefuses && tt.model != "" && !strings.Contains(err.Error(), tt.model):
				t.Errorf("the model's refusal %q does not say %q", err, tt.model)
			}
		})
	}
}

func checkDynamo(tt dynamoRule) hintsconfig.Problems {
	cfg, err := hintsconfig.ParseConfigFor([]byte(tt.doc), hintsconfig.TargetDynamo)
	if err != nil {
		if ps, ok := err.(hintsconfig.Problems); ok {
			return ps
		}
		return hintsconfig.Problems{{Severity: hintsconfig.SeverityError, Message: err.Error(), Line: -1}}
	}
	cfg.DeclaredCatalog = tt.declared
	_, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{Default: tt.mode})
	return probs
}

func frontendOf(tt dynamoRule) dynamopolicy.Frontend {
	f := dynamopolicy.Frontend{RouterMode: string(tt.mode)}
	if tt.declared {
		// What the router's declared catalog says its build links: the
		// types kvhint links, here.
		cat := builtin.NewCatalog()
		f.SelectionTypes = cat.SelectionTypes()
		f.HintPolicyTypes = cat.HintTypes()
		f.RequestClassifiers = []string{"by-length", "a"}
	}
	return f
}
