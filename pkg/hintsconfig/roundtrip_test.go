package hintsconfig_test

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// compileDynamo validates doc for the dynamo target (the router's declared
// catalog being kvhint's, so kvhint's hint types are linked) and returns
// what compile writes, or the refusal.
func compileDynamo(t *testing.T, doc string) ([]byte, hintsconfig.Problems) {
	t.Helper()
	cfg, err := hintsconfig.ParseConfigFor([]byte(doc), hintsconfig.TargetDynamo)
	if err != nil {
		return nil, err.(hintsconfig.Problems)
	}
	cfg.DeclaredCatalog = true
	g, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{})
	if probs.HasErrors() {
		return nil, probs
	}
	out, _, err := g.Encode()
	if err != nil {
		t.Fatalf("Encode of an accepted file: %v\n%s", err, doc)
	}
	return out, nil
}

// TestCompileWritesWhatYouWrote: a released-form file that validation
// accepts compiles to itself, value for value: instance names kept,
// unselected instances kept, no value rewritten, nothing dropped.
func TestCompileWritesWhatYouWrote(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"a file of kv_hint_policy alone", "kv_hint_policy:\n  type: kv-retain\n  parameters:\n    ttl_seconds: 30\n"},
		{"instances keep their names", "worker_selection:\n  decode: fast\n  prefill: fast\n  instances:\n    - {name: fast, type: dynamo-two-tier-cost-fn, parameters: {cache_threshold: 0.7}}\n"},
		{"an unselected instance is kept", "worker_selection:\n  decode: default\n  instances:\n    - {name: spare, type: dynamo-random}\n"},
		{"the widest integers", "worker_selection:\n  decode: a\n  instances:\n    - {name: a, type: dynamo-default-cost-fn, parameters: {seed: 18446744073709551615}}\n    - {name: b, type: dynamo-soft-affinity-load-guard, parameters: {move_margin: 18446744073709551615}}\n"},
		{"an instance named on", "worker_selection:\n  decode: on\n  instances:\n    - {name: on, type: dynamo-random}\n"},
		{"router settings and a profile", "router:\n  router_temperature: 0.25\n  router_event_threads: 4\n" + profile(", prefill_busy_threshold_frac: 16.5")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, probs := compileDynamo(t, tt.doc)
			if probs != nil {
				t.Fatalf("refused: %v", probs)
			}
			if diff := cmp.Diff(values(t, tt.doc), values(t, string(out))); diff != "" {
				t.Errorf("compile rewrote the file (-written +compiled):\n%s\ncompiled:\n%s", diff, out)
			}
		})
	}
}

// TestCompileRoundTripProperty: every released-form file that validation
// for the dynamo target accepts compiles to a file that it, and the model
// of Dynamo, accept again, with equal values. Files come from a seeded
// generator that mixes valid and invalid values of every stock type.
func TestCompileRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 2026))
	accepted := 0
	for i := range 400 {
		doc := genReleased(rng)
		out, probs := compileDynamo(t, doc)
		if probs != nil {
			continue
		}
		accepted++
		if _, again := compileDynamo(t, string(out)); again != nil {
			t.Fatalf("case %d: compiled file refused: %v\nwritten:\n%s\ncompiled:\n%s", i, again, doc, out)
		}
		if err := dynamopolicy.CheckReleased(out); err != nil {
			t.Fatalf("case %d: the model refuses the compiled file: %v\n%s", i, err, out)
		}
		if diff := cmp.Diff(values(t, doc), values(t, string(out))); diff != "" {
			t.Fatalf("case %d: values changed (-written +compiled):\n%s\nwritten:\n%s\ncompiled:\n%s", i, diff, doc, out)
		}
	}
	t.Logf("%d of 400 generated files accepted", accepted)
	// The generator must reach both sides of the rules to prove anything.
	if accepted < 50 || accepted > 380 {
		t.Fatalf("%d of 400 generated files accepted; the generator no longer exercises both directions", accepted)
	}
}

// genReleased writes a random released-form file: instances of stock
// types with parameters in and out of bounds, written as integers, floats,
// nulls and extremes; roles naming them or default; sometimes a hint
// policy, router settings, a root profile.
func genReleased(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	num := func() string {
		return pick("0", "1", "1.0", "0.5", "2", "32", "32.0", "1.1", "-1", "1e-9", "18446744073709551615", "18446744073709551616", "null", ".inf", "0.75", "100")
	}
	params := map[string][]string{
		"dynamo-default-cost-fn":          {"overlap_score_credit", "overlap_score_credit_decay", "prefill_load_scale", "decode_active_request_weight", "host_cache_hit_weight", "disk_cache_hit_weight", "shared_cache_multiplier", "router_temperature", "seed"},
		"dynamo-two-tier-cost-fn":         {"cache_threshold", "balance_abs_threshold", "balance_rel_threshold"},
		"dynamo-soft-affinity-load-guard": {"max_active_requests", "move_margin"},
		"dynamo-round-robin":              nil,
		"dynamo-least-loaded":             nil,
	}
	types := []string{"dynamo-default-cost-fn", "dynamo-two-tier-cost-fn", "dynamo-soft-affinity-load-guard", "dynamo-round-robin", "dynamo-least-loaded"}
	var b strings.Builder
	if rng.IntN(3) == 0 {
		fmt.Fprintf(&b, "kv_hint_policy:\n  type: kv-retain\n  parameters: {ttl_seconds: %s}\n", pick("30", "600", "30.0", "0", "null"))
	}
	if rng.IntN(4) == 0 {
		fmt.Fprintf(&b, "router:\n  router_temperature: %s\n  use_kv_events: %s\n", num(), pick("true", "false", "on"))
	}
	if rng.IntN(5) == 0 {
		b.WriteString(profile(", prefill_busy_threshold_frac: " + num()))
	}
	n := rng.IntN(3)
	var names []string
	if n > 0 || rng.IntN(2) == 0 {
		b.WriteString("worker_selection:\n")
		for i := range n {
			names = append(names, pick("a", "b.c", "on", "x-1", "default_")+strconv.Itoa(i))
		}
		for _, role := range []string{"aggregated", "prefill", "decode", "encode"} {
			if rng.IntN(2) == 0 {
				continue
			}
			target := "default"
			if len(names) > 0 && rng.IntN(3) > 0 {
				target = names[rng.IntN(len(names))]
			}
			fmt.Fprintf(&b, "  %s: %s\n", role, target)
		}
		if n > 0 {
			b.WriteString("  instances:\n")
		}
		for _, name := range names {
			typ := types[rng.IntN(len(types))]
			fmt.Fprintf(&b, "    - name: %s\n      type: %s\n", name, typ)
			keys := params[typ]
			if len(keys) == 0 || rng.IntN(3) == 0 {
				continue
			}
			b.WriteString("      parameters:\n")
			for _, k := range keys {
				if rng.IntN(2) == 0 {
					fmt.Fprintf(&b, "        %s: %s\n", k, num())
				}
			}
			if typ == "dynamo-two-tier-cost-fn" && rng.IntN(3) == 0 {
				fmt.Fprintf(&b, "        adaptive: {update_interval_ms: %s, load_scale: %s}\n", pick("100", "100.0", "0", "250"), pick("32.0", "8", "0.5"))
			}
		}
	}
	return b.String()
}

// values reads a policy file into comparable values, as Dynamo reads it:
// YAML 1.2, a null or an empty parameters mapping the same as none, and
// numbers by value (1 and 1.0 are one value; integers exact).
func values(t *testing.T, doc string) any {
	t.Helper()
	var n yamlv3.Node
	if err := yamlv3.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if len(n.Content) == 0 {
		return nil
	}
	return normal(n.Content[0])
}

func normal(n *yamlv3.Node) any {
	switch n.Kind {
	case yamlv3.AliasNode:
		return normal(n.Alias)
	case yamlv3.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v := normal(n.Content[i+1])
			if v == nil {
				continue // null: unset
			}
			if mm, ok := v.(map[string]any); ok && len(mm) == 0 && n.Content[i].Value == "parameters" {
				continue // parameters: {} is none
			}
			m[n.Content[i].Value] = v
		}
		return m
	case yamlv3.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = normal(c)
		}
		return out
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!int":
		v, _ := new(big.Int).SetString(strings.TrimPrefix(n.Value, "+"), 0)
		return "number " + v.String()
	case "!!float":
		f, _ := strconv.ParseFloat(n.Value, 64)
		if f == math.Trunc(f) && math.Abs(f) < 1e18 {
			return "number " + strconv.FormatInt(int64(f), 10)
		}
		return "number " + strconv.FormatFloat(f, 'g', -1, 64)
	case "!!bool":
		return n.Value == "true"
	}
	return n.Value
}

// TestCompileKeepsKVHintPolicyForTheSidecar: the sidecar target reads a
// file of kv_hint_policy alone too, and compiles it to itself, not to {}.
func TestCompileKeepsKVHintPolicyForTheSidecar(t *testing.T) {
	const doc = "kv_hint_policy:\n  type: kv-retain\n  parameters:\n    ttl_seconds: 30\n"
	g, probs := hintsconfig.CompileFor(builtin.NewCatalog(), []byte(doc), hintsconfig.TargetSidecar, hintsconfig.Modes{})
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	out, _, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(values(t, doc), values(t, string(out))); diff != "" {
		t.Errorf("compile rewrote the file (-written +compiled):\n%s", diff)
	}
}

// FuzzCompileDynamo: any bytes read for the dynamo target give problems
// with a reason and a message, never a panic; a file accepted compiles to a
// file accepted again, with equal values. The seeds are every case of
// TestDynamoRules.
func FuzzCompileDynamo(f *testing.F) {
	for _, r := range dynamoRules {
		f.Add([]byte(r.doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := hintsconfig.ParseConfigFor(data, hintsconfig.TargetDynamo)
		if err != nil {
			probs, ok := err.(hintsconfig.Problems)
			if !ok || len(probs) == 0 {
				t.Fatalf("error %T %v; want Problems", err, err)
			}
			for _, p := range probs {
				if p.Message == "" || p.Reason == "" {
					t.Fatalf("problem without a reason or message: %+v", p)
				}
			}
			return
		}
		cfg.DeclaredCatalog = true
		g, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{})
		if probs.HasErrors() {
			return
		}
		out, _, err := g.Encode()
		if err != nil {
			t.Fatalf("Encode of an accepted file: %v", err)
		}
		if _, again := compileDynamo(t, string(out)); again != nil {
			t.Fatalf("compiled file refused: %v\nwritten:\n%s\ncompiled:\n%s", again, data, out)
		}
		if diff := cmp.Diff(values(t, string(data)), values(t, string(out))); diff != "" {
			t.Fatalf("values changed (-written +compiled):\n%s", diff)
		}
	})
}
