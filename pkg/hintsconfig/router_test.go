package hintsconfig_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestCheckRoleIsCompileOfTheRole holds CheckRole to what Compile says of
// a config that holds the role alone, for the sidecar and for stock and
// declared Dynamo builds: the same problems, the same resolved role.
func TestCheckRoleIsCompileOfTheRole(t *testing.T) {
	cat := builtin.NewCatalog()
	hs := func(types ...string) *[]hintsconfig.HintSpec {
		out := []hintsconfig.HintSpec{}
		for _, typ := range types {
			out = append(out, hintsconfig.HintSpec{Type: typ})
		}
		return &out
	}
	entries := map[string]*hintsconfig.RoleEntry{
		"defaults":          {Type: "dynamo-default-cost-fn"},
		"one hint":          {Type: "dynamo-default-cost-fn", Hints: hs("kv-retain")},
		"unknown selection": {Type: "no-such-selection", Hints: hs()},
		"unknown hint":      {Type: "dynamo-default-cost-fn", Hints: hs("no-such-hint")},
		"bad parameters":    {Type: "dynamo-two-tier-cost-fn", Parameters: []byte(`{"cache_threshold":7}`), Hints: hs()},
	}
	readers := map[string]hintsconfig.Reader{
		"sidecar":        {},
		"stock Dynamo":   {Form: hintsconfig.FormRouterWideHint, Target: hintsconfig.TargetDynamo},
		"declared build": {Form: hintsconfig.FormRouterWideHint, Target: hintsconfig.TargetDynamo, DeclaredCatalog: true},
	}
	modes := map[string]hintsconfig.Modes{
		"kv":                    {Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeKV}},
		"round-robin by a flag": {Default: hintsconfig.ModeRoundRobin, Flag: "--router-mode of container frontend"},
	}
	for en, entry := range entries {
		for rn, rd := range readers {
			for mn, m := range modes {
				t.Run(en+"/"+rn+"/"+mn, func(t *testing.T) {
					got := hintsconfig.CheckRole(cat, hintsconfig.RoleInput{Reader: rd, Name: "decode", Entry: entry, Modes: m})
					cfg := &hintsconfig.Config{Target: rd.Target, DeclaredCatalog: rd.DeclaredCatalog,
						WorkerSelection: map[string]*hintsconfig.RoleEntry{"decode": entry}}
					g, probs := hintsconfig.Compile(cat, cfg, m)
					if diff := cmp.Diff(probs.Error(), got.Problems.Error()); diff != "" {
						t.Errorf("problems (-Compile +CheckRole):\n%s", diff)
					}
					want, ok := g.Role("decode")
					if !ok || probs.HasErrors() {
						if got.Role != nil || got.Entry != nil {
							t.Errorf("CheckRole resolved a role Compile refused: %+v", got.Entry)
						}
						return
					}
					if got.Role == nil {
						t.Fatalf("CheckRole refused a role Compile accepted: %v", got.Problems)
					}
					if diff := cmp.Diff(want.Entry(), got.Entry); diff != "" {
						t.Errorf("entry (-Compile +CheckRole):\n%s", diff)
					}
					if got.Role.Mode != want.Mode || got.Role.Defaulted != want.Defaulted {
						t.Errorf("role runs %s (defaulted %v), Compile's %s (defaulted %v)", got.Role.Mode, got.Role.Defaulted, want.Mode, want.Defaulted)
					}
				})
			}
		}
	}
}

// TestCompileRouter writes a router's roles in its reader's form: the
// released form carries one hint policy for every role on the KV path,
// writes a role off it as default, and says when it cannot carry them.
func TestCompileRouter(t *testing.T) {
	cat := builtin.NewCatalog()
	check := func(role string, mode hintsconfig.RouterMode, hint string) *hintsconfig.Role {
		t.Helper()
		e := &hintsconfig.RoleEntry{Type: "dynamo-default-cost-fn", Hints: &[]hintsconfig.HintSpec{}}
		if hint != "" {
			e.Hints = &[]hintsconfig.HintSpec{{Type: hint}}
		}
		res := hintsconfig.CheckRole(cat, hintsconfig.RoleInput{Name: role, Entry: e, Modes: hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{role: mode}}})
		if res.Role == nil {
			t.Fatalf("role %s: %v", role, res.Problems)
		}
		return res.Role
	}
	wide := hintsconfig.Reader{Form: hintsconfig.FormRouterWideHint, Target: hintsconfig.TargetDynamo, DeclaredCatalog: true}

	res := hintsconfig.CompileRouter(cat, hintsconfig.RouterInput{Reader: wide, Roles: []*hintsconfig.Role{
		check("decode", hintsconfig.ModeKV, "kv-retain"), check("prefill", hintsconfig.ModeKV, "kv-retain"), check("encode", hintsconfig.ModeRoundRobin, ""),
	}})
	if res.CannotCarry != nil || res.Problems.HasErrors() {
		t.Fatalf("one policy for every KV role: %v %v", res.CannotCarry, res.Problems)
	}
	out, _, err := res.Graph.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kv_hint_policy:\n", "  type: kv-retain\n", "  encode: default\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the config does not hold %q:\n%s", want, out)
		}
	}

	res = hintsconfig.CompileRouter(cat, hintsconfig.RouterInput{Reader: wide, Roles: []*hintsconfig.Role{
		check("decode", hintsconfig.ModeKV, "kv-retain"), check("prefill", hintsconfig.ModeKV, ""),
	}})
	if res.CannotCarry == nil || res.CannotCarry.Reason != hintsconfig.ReasonPolicyFormCannotCarry || !strings.Contains(res.CannotCarry.Message, "role prefill runs no hint policy") {
		t.Errorf("different policies per role: CannotCarry is %+v", res.CannotCarry)
	}

	per := hintsconfig.CompileRouter(cat, hintsconfig.RouterInput{Roles: []*hintsconfig.Role{
		check("decode", hintsconfig.ModeKV, "kv-retain"), check("prefill", hintsconfig.ModeKV, ""),
	}})
	if per.CannotCarry != nil || len(per.Graph.Roles) != 2 {
		t.Errorf("the per-role form carries any roles: %+v, %d roles", per.CannotCarry, len(per.Graph.Roles))
	}
	if empty := hintsconfig.CompileRouter(cat, hintsconfig.RouterInput{}); len(empty.Graph.Roles) != 0 || empty.Problems != nil {
		t.Errorf("no roles: %d roles, %v", len(empty.Graph.Roles), empty.Problems)
	}
}
