package hintsconfig_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestRouterWideHintForm reads and checks files in the form a released
// Dynamo Frontend reads: roles name worker_selection.instances (or
// default), one kv_hint_policy at the root runs for the whole router.
// form is the form the file is read in; empty reads it from the file (a
// root kv_hint_policy is the released form).
func TestRouterWideHintForm(t *testing.T) {
	E := hintsconfig.SeverityError
	tests := []struct {
		name     string
		form     hintsconfig.Form
		doc      string
		modes    hintsconfig.Modes
		parseErr []string            // words of the parse refusal; nil parses
		want     []problemKey        // Compile's problems
		line     int                 // the first problem's line, when not 0
		hints    map[string][]string // role -> hint types that run
		sels     map[string]string   // role -> worker-selection type
	}{
		{
			name: "kv_hint_policy runs on every role; default is the built-in selector",
			doc: "kv_hint_policy:\n  type: kv-retain\n  parameters: {ttl_seconds: 60}\nworker_selection:\n  decode: rr\n  prefill: default\n" +
				"  instances:\n    - {name: rr, type: dynamo-round-robin}\n",
			hints: map[string][]string{"decode": {"kv-retain"}, "prefill": {"kv-retain"}},
			sels:  map[string]string{"decode": "dynamo-round-robin", "prefill": "dynamo-default-cost-fn"},
		},
		{
			name:  "without kv_hint_policy no role runs a hint policy (the per-role form would run the defaults)",
			form:  hintsconfig.FormRouterWideHint,
			doc:   "worker_selection:\n  aggregated: rr\n  instances:\n    - {name: rr, type: dynamo-round-robin}\n",
			hints: map[string][]string{"aggregated": {}},
			sels:  map[string]string{"aggregated": "dynamo-round-robin"},
		},
		{
			// Dynamo's kv-hint registry test (lib/kv-router/src/plugins/kv_hint/registry.rs)
			// loads a file of kv_hint_policy alone.
			name:  "a file of kv_hint_policy alone",
			doc:   "kv_hint_policy:\n  type: kv-retain\n  parameters:\n    ttl_seconds: 30\n",
			hints: map[string][]string{},
		},
		{
			name:     "a role written as the per-role mapping",
			form:     hintsconfig.FormRouterWideHint,
			doc:      "worker_selection:\n  decode: {type: dynamo-random, hints: []}\n",
			parseErr: []string{"role decode", "names an instance", "PerRoleHints"},
		},
		{
			name:     "a role that names no instance",
			doc:      "kv_hint_policy: {type: kv-evict}\nworker_selection:\n  encode: missing\n  instances: [{name: rr, type: dynamo-round-robin}]\n",
			parseErr: []string{`worker_selection encode "missing" does not name a configured instance`, "instances: rr"},
		},
		{
			name:     "kv_hint_policy type default is reserved",
			doc:      "kv_hint_policy: {type: default}\nworker_selection:\n  encode: default\n",
			parseErr: []string{"type 'default' is reserved; omit kv_hint_policy"},
		},
		{
			name:     "kv_hint_policy parameters that are not a mapping",
			doc:      "kv_hint_policy: {type: kv-retain, parameters: 1}\n",
			parseErr: []string{"kv_hint_policy: parameters: got 1", "must be a YAML mapping"},
		},
		{
			name:     "kv_hint_policy parameters null",
			doc:      "kv_hint_policy: {type: kv-retain, parameters: null}\n",
			parseErr: []string{"must be a YAML mapping"},
		},
		{
			name:     "kv_hint_policy with a name",
			doc:      "kv_hint_policy: {type: kv-retain, name: long}\n",
			parseErr: []string{`kv_hint_policy: unknown key "name"; known: parameters, type`},
		},
		{
			name:     "an instance's parameters null",
			form:     hintsconfig.FormRouterWideHint,
			doc:      "worker_selection:\n  decode: rr\n  instances: [{name: rr, type: dynamo-round-robin, parameters: null}]\n",
			parseErr: []string{"instances[0]", "must be a YAML mapping"},
		},
		{
			name:     "an unknown root key names the form's keys",
			doc:      "kv_hint_policy: {type: kv-evict}\nrouting: kv\n",
			parseErr: []string{`unknown key "routing"`, "worker_selection, kv_hint_policy, default_policy_family"},
		},
		{
			// router_mode has a message of its own, in either form.
			name:     "router_mode at the root says where the mode went",
			doc:      "kv_hint_policy: {type: kv-evict}\nrouter_mode: kv\n",
			parseErr: []string{`unknown key "router_mode"`, "--router-mode", "spec.routerMode"},
		},
		{
			name:     "kv_hint_policy in a file read in the per-role form",
			form:     hintsconfig.FormPerRoleHints,
			doc:      "kv_hint_policy: {type: kv-evict}\nworker_selection:\n  decode: default\n",
			parseErr: []string{"belongs to the RouterWideHint form", "read in the PerRoleHints form"},
		},
		{
			name:  "kv_hint_policy parameters are checked once, at kv_hint_policy",
			doc:   "kv_hint_policy:\n  type: kv-retain\n  parameters:\n    ttl_seconds: 0\nworker_selection:\n  decode: default\n  prefill: default\n",
			want:  []problemKey{{E, hintsconfig.ReasonInvalidParameters, "", hintsconfig.NoHint, "ttl_seconds"}},
			line:  4,
			hints: map[string][]string{"decode": {}, "prefill": {}},
		},
		{
			name:  "a kv_hint_policy type not linked",
			doc:   "kv_hint_policy:\n  type: harness_prefetch\nworker_selection:\n  decode: default\n",
			want:  []problemKey{{E, hintsconfig.ReasonUnknownHintType, "", hintsconfig.NoHint, ""}},
			line:  2,
			hints: map[string][]string{"decode": {}},
		},
		{
			name:  "kv_hint_policy with no role on the KV path",
			doc:   "kv_hint_policy: {type: kv-evict}\nworker_selection:\n  decode: default\n",
			modes: hintsconfig.Modes{Default: hintsconfig.ModeRoundRobin, Flag: "--router-mode"},
			want:  []problemKey{{E, hintsconfig.ReasonHintsRequireKVMode, "", hintsconfig.NoHint, ""}},
			hints: map[string][]string{"decode": {}},
		},
		{
			name:  "a role off the KV path runs none of it",
			doc:   "kv_hint_policy: {type: kv-evict}\nworker_selection:\n  decode: default\n  prefill: default\n",
			modes: hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeKV, "prefill": hintsconfig.ModeRandom}},
			hints: map[string][]string{"decode": {"kv-evict"}, "prefill": {}},
		},
		{
			name:  "a selection that commits copies needs kv_hint_policy to send them",
			form:  hintsconfig.FormRouterWideHint,
			doc:   "worker_selection:\n  decode: reuse\n  instances: [{name: reuse, type: kvcr}]\n",
			want:  []problemKey{{E, hintsconfig.ReasonKVCopySenderMissing, "decode", hintsconfig.NoHint, ""}},
			hints: map[string][]string{},
		},
		{
			name:  "kv-fetch as the router's hint policy sends them",
			doc:   "kv_hint_policy: {type: kv-fetch}\nworker_selection:\n  decode: reuse\n  instances: [{name: reuse, type: kvcr}]\n",
			hints: map[string][]string{"decode": {"kv-fetch"}},
			sels:  map[string]string{"decode": "kvcr"},
		},
		{
			// Dynamo's non_kv_types_reject_parameters (lib/router-plugins/builtin/src/lib.rs).
			name:  "seed under dynamo-round-robin",
			form:  hintsconfig.FormRouterWideHint,
			doc:   "worker_selection:\n  aggregated: rr\n  instances:\n    - name: rr\n      type: dynamo-round-robin\n      parameters:\n        seed: 7\n",
			want:  []problemKey{{E, hintsconfig.ReasonInvalidParameters, "aggregated", hintsconfig.NoHint, "seed"}},
			line:  7,
			hints: map[string][]string{},
		},
	}
	cat := builtin.NewCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := hintsconfig.ParseConfigForm([]byte(tt.doc), tt.form)
			if tt.parseErr != nil {
				if err == nil {
					t.Fatalf("parsed; want a refusal saying %q", tt.parseErr)
				}
				for _, w := range tt.parseErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfigForm: %v", err)
			}
			if cfg.Form != hintsconfig.FormRouterWideHint {
				t.Fatalf("read in form %q, want %q", cfg.Form, hintsconfig.FormRouterWideHint)
			}
			g, probs := hintsconfig.Compile(cat, cfg, tt.modes)
			want := tt.want
			if want == nil {
				want = []problemKey{}
			}
			if diff := cmp.Diff(want, keys(probs)); diff != "" {
				t.Fatalf("problems (-want +got):\n%s\n%v", diff, probs)
			}
			if tt.line != 0 && probs[0].Line != tt.line {
				t.Errorf("first problem on line %d, want %d: %v", probs[0].Line, tt.line, probs[0])
			}
			gotHints := map[string][]string{}
			gotSels := map[string]string{}
			for _, r := range g.Roles {
				gotHints[r.Name] = []string{}
				for _, h := range r.Hints {
					gotHints[r.Name] = append(gotHints[r.Name], h.Type)
				}
				gotSels[r.Name] = r.Selection.Type
			}
			if diff := cmp.Diff(tt.hints, gotHints); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
			if tt.sels != nil {
				if diff := cmp.Diff(tt.sels, gotSels); diff != "" {
					t.Errorf("selections (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestRouterWideHintEncode writes compiled roles in the released form and
// reads them back: the same roles, selections and hint policies.
func TestRouterWideHintEncode(t *testing.T) {
	cat := builtin.NewCatalog()
	doc := "worker_selection:\n" +
		"  decode:\n    type: dynamo-two-tier-cost-fn\n    parameters: {cache_threshold: 0.7}\n    hints: [{type: kv-retain, parameters: {ttl_seconds: 600}}]\n" +
		"  prefill:\n    type: dynamo-round-robin\n    hints: [{type: kv-retain, parameters: {ttl_seconds: 600}}]\n"
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Form = hintsconfig.FormRouterWideHint
	g, probs := hintsconfig.Compile(cat, cfg, hintsconfig.Modes{})
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	out, _, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const want = `kv_hint_policy:
  parameters:
    min_prompt_tokens: 0
    priority: 50
    ttl_seconds: 600
  type: kv-retain
worker_selection:
  decode: decode
  instances:
  - name: decode
    parameters:
      cache_threshold: 0.7
    type: dynamo-two-tier-cost-fn
  - name: prefill
    type: dynamo-round-robin
  prefill: prefill
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Fatalf("encoded (-want +got):\n%s", diff)
	}
	back, err := hintsconfig.ParseConfig(out)
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	g2, probs := hintsconfig.Compile(cat, back, hintsconfig.Modes{})
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	again, _, err := g2.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(out), string(again)); diff != "" {
		t.Errorf("not stable across a read (-first +second):\n%s", diff)
	}
}

// TestRouterWideHintPolicy is the rule of what the released form can
// carry: every role on the KV path runs the same single hint policy, or
// none does.
func TestRouterWideHintPolicy(t *testing.T) {
	role := func(name string, mode hintsconfig.RouterMode, hs ...*hintsconfig.Hint) *hintsconfig.Role {
		return &hintsconfig.Role{Name: name, Mode: mode, Hints: hs}
	}
	retain := func(params string) *hintsconfig.Hint {
		return &hintsconfig.Hint{Type: "kv-retain", Params: []byte(params)}
	}
	kv, rr := hintsconfig.ModeKV, hintsconfig.ModeRoundRobin
	tests := []struct {
		name    string
		roles   []*hintsconfig.Role
		want    string // type of the policy carried; "" none
		refused []string
	}{
		{name: "no role", want: ""},
		{name: "no hints anywhere", roles: []*hintsconfig.Role{role("decode", kv), role("prefill", kv)}},
		{name: "the same policy, parameters in another order", roles: []*hintsconfig.Role{
			role("decode", kv, retain(`{"ttl_seconds":60,"priority":5}`)), role("prefill", kv, retain(`{"priority":5,"ttl_seconds":60}`))}, want: "kv-retain"},
		{name: "a role off the KV path does not count", roles: []*hintsconfig.Role{role("decode", kv, retain(`{}`)), role("encode", rr)}, want: "kv-retain"},
		{name: "other parameters", roles: []*hintsconfig.Role{role("decode", kv, retain(`{"ttl_seconds":60}`)), role("prefill", kv, retain(`{"ttl_seconds":61}`))},
			refused: []string{`role prefill runs [kv-retain {"ttl_seconds":61}]`, `role decode runs [kv-retain {"ttl_seconds":60}]`, "RouterWideHint", "policyFileForm: PerRoleHints"}},
		{name: "one role without", roles: []*hintsconfig.Role{role("decode", kv, retain(`{}`)), role("prefill", kv)},
			refused: []string{"role prefill runs no hint policy"}},
		{name: "two in one role", roles: []*hintsconfig.Role{role("decode", kv, retain(`{}`), &hintsconfig.Hint{Type: "kv-evict"})},
			refused: []string{"role decode runs [kv-retain {}, kv-evict]", "nor one role more than one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, p := hintsconfig.RouterWideHintPolicy(tt.roles)
			if tt.refused != nil {
				if p == nil {
					t.Fatalf("carried %v; want a refusal", h)
				}
				if p.Reason != hintsconfig.ReasonPolicyFormCannotCarry {
					t.Errorf("reason %s", p.Reason)
				}
				for _, w := range tt.refused {
					if !strings.Contains(p.Message, w) {
						t.Errorf("message %q does not say %q", p.Message, w)
					}
				}
				return
			}
			if p != nil {
				t.Fatalf("refused: %v", p)
			}
			got := ""
			if h != nil {
				got = h.Type
			}
			if got != tt.want {
				t.Errorf("carried %q, want %q", got, tt.want)
			}
		})
	}

	// Encode refuses a graph the form cannot carry, with the same reason.
	cfg, err := hintsconfig.ParseConfig([]byte("worker_selection:\n  decode: {type: dynamo-random, hints: [{type: kv-evict}]}\n  prefill: {type: dynamo-random, hints: []}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Form = hintsconfig.FormRouterWideHint
	g, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{})
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	_, _, err = g.Encode()
	var ps hintsconfig.Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Reason != hintsconfig.ReasonPolicyFormCannotCarry {
		t.Fatalf("Encode: %v; want one PolicyFormCannotCarry problem", err)
	}
}

// TestRouterWideNonKVRoleNamesDefault: a role off the KV path is written
// as default, never as a custom instance, which a Frontend outside
// --router-mode kv refuses (linked worker-selection policies require
// --router-mode kv); roles on the KV path still name their instances.
func TestRouterWideNonKVRoleNamesDefault(t *testing.T) {
	cfg := &hintsconfig.Config{Target: hintsconfig.TargetDynamo, WorkerSelection: map[string]*hintsconfig.RoleEntry{
		"decode":  {Type: "dynamo-round-robin", Hints: &[]hintsconfig.HintSpec{}},
		"prefill": {Type: "dynamo-two-tier-cost-fn", Parameters: []byte(`{"cache_threshold":0.7}`), Hints: &[]hintsconfig.HintSpec{}},
	}}
	g, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeRoundRobin}})
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	out, _, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const want = "worker_selection:\n  decode: default\n  instances:\n  - name: prefill\n    parameters:\n      cache_threshold: 0.7\n    type: dynamo-two-tier-cost-fn\n  prefill: prefill\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("encoded (-want +got):\n%s", diff)
	}
}
