package builtin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

// parsed is a built-in policy with the commitments its provider declared.
type parsed struct {
	policy      hints.HintPolicy
	commitments hints.Commitments
}

// parseHint builds a policy of a built-in type the way Compile does.
func parseHint(t *testing.T, typ, params string) (*parsed, error) {
	t.Helper()
	p, ok := builtin.NewCatalog().Hint(typ)
	if !ok {
		t.Fatalf("%s is not registered", typ)
	}
	pol, err := p.Parse(hints.Params(params))
	if err != nil {
		return nil, err
	}
	return &parsed{policy: pol, commitments: p.Commitments}, nil
}

// rendered is an action as the wire format shows it.
type rendered struct{ Type, Version, Payload string }

func build(t *testing.T, h *parsed, b hintstest.Booking) []rendered {
	t.Helper()
	actions, err := hintstest.BuildHints(t.Context(), h.policy, h.commitments, b)
	if err != nil {
		t.Fatalf("BuildHints: %v", err)
	}
	out := []rendered{}
	for _, a := range actions {
		if err := a.Payload.Validate(); err != nil {
			t.Errorf("payload: %v", err)
		}
		out = append(out, rendered{a.Type, a.Version, string(a.Payload.Bytes())})
	}
	return out
}

// paramCase is one row of a parameter table: the parameters and either the
// effective parameters or the words of the error.
type paramCase struct {
	name    string
	params  string
	want    string // effective parameters, JSON
	errKey  string
	errWord string
}

func runParamCases(t *testing.T, typ string, cases []paramCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			h, err := parseHint(t, typ, tt.params)
			checkParamResult(t, err, tt)
			if err == nil && tt.want != "" {
				got := string(effective(t, h.policy))
				if got != tt.want {
					t.Errorf("effective parameters %s, want %s", got, tt.want)
				}
			}
		})
	}
}

func checkParamResult(t *testing.T, err error, tt paramCase) {
	t.Helper()
	if tt.errWord == "" {
		if err != nil {
			t.Fatalf("Parse(%s): %v", tt.params, err)
		}
		return
	}
	pe, ok := err.(*hints.ParamError)
	if !ok {
		t.Fatalf("Parse(%s) err = %v; want *ParamError", tt.params, err)
	}
	if pe.Key != tt.errKey || !strings.Contains(pe.Error(), tt.errWord) {
		t.Errorf("err = %q (key %q); want key %q and %q", pe.Error(), pe.Key, tt.errKey, tt.errWord)
	}
}

func effective(t *testing.T, policy any) []byte {
	t.Helper()
	rep, ok := policy.(hints.ParameterReporter)
	if !ok {
		t.Fatalf("%T does not report its parameters", policy)
	}
	return mustJSON(t, rep.EffectiveParameters())
}

func TestBuiltinCatalog(t *testing.T) {
	cat := builtin.NewCatalog()
	if diff := cmp.Diff([]string{"kv-evict", "kv-fetch", "kv-retain"}, cat.HintTypes()); diff != "" {
		t.Errorf("hint types (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{
		"dynamo-default-cost-fn", "dynamo-device-aware-weighted", "dynamo-direct", "dynamo-least-loaded",
		"dynamo-power-of-two-choices", "dynamo-random", "dynamo-round-robin", "dynamo-soft-affinity-load-guard",
		"dynamo-two-tier-cost-fn", "kvcr",
	}, cat.SelectionTypes()); diff != "" {
		t.Errorf("selection types (-want +got):\n%s", diff)
	}
	// Listings follow registration order: Dynamo's KV-aware selections,
	// its load-only ones in router-mode order, its soft-affinity load
	// guard, then kvcr.
	var order []string
	for _, p := range cat.SelectionProviders() {
		order = append(order, p.Type)
		if p.Description == "" {
			t.Errorf("%s has no description", p.Type)
		}
	}
	if diff := cmp.Diff([]string{
		builtin.TypeDefaultCostFn, builtin.TypeTwoTierCostFn,
		builtin.TypeRoundRobin, builtin.TypeRandom, builtin.TypePowerOfTwoChoices, builtin.TypeLeastLoaded,
		builtin.TypeDirect, builtin.TypeDeviceAwareWeighted, builtin.TypeSoftAffinityLoadGuard,
		builtin.TypeKVCR,
	}, order); diff != "" {
		t.Errorf("selection registration order (-want +got):\n%s", diff)
	}
	// The names before Dynamo's are gone, with no aliases.
	for _, old := range []string{"round-robin", "random", "least-loaded", "power-of-two"} {
		if _, ok := cat.Selection(old); ok {
			t.Errorf("%s is still registered", old)
		}
	}
	if err := builtin.Register(cat); err == nil {
		t.Error("registering the built-ins twice succeeded; want a duplicate-type error")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
