package hintsconfig_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// parseAndCompile runs what the sidecar and `kvhint validate` run on a
// hints YAML file: ParseConfig, then Compile.
func parseAndCompile(t *testing.T, doc string) hintsconfig.Problems {
	t.Helper()
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		probs, ok := err.(hintsconfig.Problems)
		if !ok {
			t.Fatalf("error %T %v; want hintsconfig.Problems", err, err)
		}
		return probs
	}
	_, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{})
	return probs
}

// located is a problem as a CI annotation needs it.
type located struct {
	Reason hintsconfig.Reason
	Role   string
	Hint   int
	Type   string
	Key    string
	Line   int
}

func locate(ps hintsconfig.Problems) []located {
	out := []located{}
	for _, p := range ps.Errors() {
		out = append(out, located{p.Reason, p.Role, p.Hint, p.Type, p.Key, p.Line})
	}
	return out
}

// TestParseConfigFoundAsANewUserWould holds the cases a new user ran into:
// each used to pass, or fail without saying where, and now fails with the
// role, item, type, key and line.
func TestParseConfigFoundAsANewUserWould(t *testing.T) {
	const noHint = hintsconfig.NoHint
	tests := []struct {
		name  string
		doc   string
		want  []located
		words []string
	}{{
		name: "a second YAML document",
		doc: "worker_selection:\n  prefill: dynamo-default-cost-fn\n" +
			"---\nworker_selection:\n  decode: dynamo-default-cost-fn\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 4}},
		words: []string{"2 YAML documents", "one document"},
	}, {
		name: ".nan for a bounded float",
		doc:  "worker_selection:\n  decode:\n    type: kvcr\n    parameters:\n      shared_cache_multiplier: .nan\n",
		want: []located{{hintsconfig.ReasonInvalidParameters, "decode", noHint, "kvcr", "shared_cache_multiplier", 5}},
		// The provider's own words, with the value as written.
		words: []string{`worker-selection kvcr: parameter "shared_cache_multiplier": .nan is out of range 0..`},
	}, {
		name:  ".inf for a bounded float",
		doc:   "worker_selection:\n  decode: {type: kvcr, parameters: {shared_cache_multiplier: .inf}}\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "decode", noHint, "kvcr", "shared_cache_multiplier", 2}},
		words: []string{`parameter "shared_cache_multiplier": .inf is out of range 0..`},
	}, {
		name:  "-.inf for an integer of a hint",
		doc:   "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n    - type: kv-retain\n      parameters:\n        ttl_seconds: -.inf\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "decode", 0, "kv-retain", "ttl_seconds", 7}},
		words: []string{"parameter \"ttl_seconds\": invalid type: floating point `-.inf`, expected i64"},
	}, {
		// An integer too large for its type reads as written, not as the
		// float YAML 1.1 rounds it to, and is said to be out of range.
		name:  "a seed above the u64 maximum",
		doc:   "worker_selection:\n  decode:\n    type: kvcr\n    parameters:\n      seed: 18446744073709551616\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "decode", noHint, "kvcr", "seed", 5}},
		words: []string{`parameter "seed": 18446744073709551616 is out of range: at most 18446744073709551615`},
	}, {
		name:  "a ttl_seconds above any integer",
		doc:   "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n    - type: kv-retain\n      parameters:\n        ttl_seconds: 99999999999999999999\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "decode", 0, "kv-retain", "ttl_seconds", 7}},
		words: []string{`parameter "ttl_seconds": 99999999999999999999 is out of range: at most 9223372036854775807`},
	}, {
		name:  "a negative ttl_seconds below any integer",
		doc:   "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n    - type: kv-retain\n      parameters: {ttl_seconds: -99999999999999999999}\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "decode", 0, "kv-retain", "ttl_seconds", 6}},
		words: []string{`parameter "ttl_seconds": -99999999999999999999 is out of range: at least -9223372036854775808`},
	}, {
		name:  "a root router_mode from an earlier compile",
		doc:   "router_mode: kv\nworker_selection: {decode: kvcr}\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 1}},
		words: []string{`unknown key "router_mode"`, "--router-mode"},
	}, {
		name:  ".nan for an unbounded float",
		doc:   "worker_selection:\n  decode:\n    type: kvcr\n    parameters:\n      router_temperature: .NaN\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "decode", noHint, "kvcr", "router_temperature", 5}},
		words: []string{"router_temperature", ".NaN"},
	}, {
		name: "a kv-retain named kv-evict next to an unnamed kv-evict",
		doc:  "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n    - type: kv-retain\n      name: kv-evict\n    - type: kv-evict\n",
		want: []located{{hintsconfig.ReasonDuplicateHintName, "decode", 1, "kv-evict", "", 7}},
		words: []string{
			`hint 0 (a kv-retain named kv-evict) and hint 1 (an unnamed kv-evict, known by its type) are both known as "kv-evict"`,
			"a name may equal its own type, but not another item's name or the type of an unnamed item",
		},
	}, {
		name:  "two items with one name",
		doc:   "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n    - {type: kv-retain, name: keep}\n    - {type: kv-evict, name: keep}\n",
		want:  []located{{hintsconfig.ReasonDuplicateHintName, "decode", 1, "kv-evict", "", 6}},
		words: []string{`hint 0 (a kv-retain named keep) and hint 1 (a kv-evict named keep) are both known as "keep"`},
	}, {
		name:  "yes as a role key",
		doc:   "worker_selection:\n  yes: dynamo-default-cost-fn\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "yes", noHint, "", "", 2}},
		words: []string{`role key yes is read as "true" by YAML 1.1`, `write "yes":`},
	}, {
		name: "no and off as role keys",
		doc:  "worker_selection:\n  no: dynamo-default-cost-fn\n  off: round-robin\n",
		want: []located{
			{hintsconfig.ReasonInvalidConfig, "no", noHint, "", "", 2},
			{hintsconfig.ReasonInvalidConfig, "off", noHint, "", "", 3},
		},
		words: []string{`role key no is read as "false"`},
	}, {
		name:  "on as a parameter key",
		doc:   "worker_selection:\n  decode:\n    type: kvcr\n    parameters: {on: 1}\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "decode", noHint, "", "", 4}},
		words: []string{`key on is read as "true"`},
	}, {
		name:  "no worker_selection",
		doc:   "{}\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 0}},
		words: []string{"worker_selection is required"},
	}, {
		name:  "worker_selection with no value",
		doc:   "# the roles\nworker_selection:\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 2}},
		words: []string{"worker_selection has no value"},
	}, {
		name:  "an empty worker_selection",
		doc:   "# the roles\nworker_selection: {}\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 2}},
		words: []string{"worker_selection is empty", "Dynamo's router refuses it"},
	}, {
		name:  "a role that is not a worker type",
		doc:   "worker_selection:\n  decode: kvcr\n  chat: dynamo-default-cost-fn\n",
		want:  []located{{hintsconfig.ReasonInvalidRole, "chat", noHint, "", "", 3}},
		words: []string{`role "chat" is not one of Dynamo's worker types`},
	}, {
		name:  "an unknown parameter of an instance points at the key",
		doc:   "worker_selection:\n  aggregated: tt\n  instances:\n  - name: tt\n    type: dynamo-two-tier-cost-fn\n    parameters:\n      cache_affinity_threshold: 0.8\n",
		want:  []located{{hintsconfig.ReasonInvalidParameters, "aggregated", noHint, "dynamo-two-tier-cost-fn", "cache_affinity_threshold", 7}},
		words: []string{"cache_affinity_threshold"},
	}, {
		name:  "an instance without a type",
		doc:   "worker_selection:\n  aggregated: tt\n  instances:\n  - name: tt\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 4}},
		words: []string{"instances[0]", "name and type are required"},
	}, {
		name:  "hints with no value",
		doc:   "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "decode", noHint, "", "", 4}},
		words: []string{"hints: has no value", "leave the key out", "hints: []"},
	}, {
		name: "lines of compile-time problems",
		doc: "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n    - type: kv-fetch\n    - type: kv-teleport\n" +
			"  prefill:\n    type: kv-oracle\n",
		want: []located{
			{hintsconfig.ReasonUnknownHintType, "decode", 1, "kv-teleport", "", 6},
			{hintsconfig.ReasonUnknownWorkerSelection, "prefill", noHint, "kv-oracle", "", 8},
		},
	}, {
		name:  "KV-copy senders point at the hint list",
		doc:   "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n    - type: kv-evict\n",
		want:  []located{{hintsconfig.ReasonKVCopySenderMissing, "decode", noHint, "kvcr", "", 4}},
		words: []string{"no hint policy sends them"},
	}, {
		name:  "invalid YAML",
		doc:   "worker_selection:\n  decode: {type: kvcr\n  prefill: x\n",
		want:  []located{{hintsconfig.ReasonInvalidConfig, "", noHint, "", "", 2}},
		words: []string{"not valid YAML", "line 2"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probs := parseAndCompile(t, tt.doc)
			if diff := cmp.Diff(tt.want, locate(probs)); diff != "" {
				t.Fatalf("problems (-want +got):\n%s\nall: %v", diff, probs)
			}
			for _, w := range tt.words {
				if !strings.Contains(probs.Errors()[0].Message, w) {
					t.Errorf("message %q does not say %q", probs.Errors()[0].Message, w)
				}
			}
		})
	}
}

// TestParseConfigKeepsWhatIsWritten: quoted keys stay as written, a
// worker_selection of instances alone is a router with no role (Dynamo
// accepts it), a trailing
// document separator is not a second document, and parameters with no
// value are the defaults.
func TestParseConfigKeepsWhatIsWritten(t *testing.T) {
	for _, doc := range []string{
		"worker_selection:\n  \"decode\": dynamo-default-cost-fn\n  'prefill': dynamo-round-robin\n",
		"worker_selection:\n  instances: [{name: rr, type: dynamo-round-robin}]\n",
		"---\nworker_selection:\n  decode: kvcr\n---\n# nothing more\n",
		"worker_selection:\n  decode:\n    type: kvcr\n    parameters:\n",
		"worker_selection:\n  decode:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 1e-3}\n",
	} {
		if probs := parseAndCompile(t, doc); probs.HasErrors() {
			t.Errorf("%q: %v", doc, probs)
		}
	}
	cfg, err := hintsconfig.ParseConfig([]byte("worker_selection:\n  \"yes\": dynamo-default-cost-fn\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.WorkerSelection["yes"]; !ok {
		t.Errorf("roles %v; want the quoted key kept as yes", cfg.WorkerSelection)
	}
}

// TestNonFiniteThroughAnAlias: an alias reads as its anchor, so a .nan
// reached through one is refused at the alias's parameter too.
func TestNonFiniteThroughAnAlias(t *testing.T) {
	doc := "worker_selection:\n  decode:\n    type: kvcr\n    parameters: {shared_cache_multiplier: &x .nan}\n" +
		"  prefill:\n    type: kvcr\n    parameters: {router_temperature: *x}\n"
	got := locate(parseAndCompile(t, doc))
	want := []located{
		{hintsconfig.ReasonInvalidParameters, "decode", hintsconfig.NoHint, "kvcr", "shared_cache_multiplier", 4},
		{hintsconfig.ReasonInvalidParameters, "prefill", hintsconfig.NoHint, "kvcr", "router_temperature", 4},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
