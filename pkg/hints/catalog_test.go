package hints_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func nopParse(hints.Params) (hints.HintPolicy, error) {
	return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return nil, nil }), nil
}

func TestCatalogRegistration(t *testing.T) {
	cat := hints.NewCatalog()
	sel := func(hints.Params) (hints.SelectionPolicy, error) { return nil, nil }
	steps := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"host before its selection", cat.RegisterHint(hints.HintProvider{Type: "early", Parse: nopParse, DefaultHosts: []hints.HintHost{hints.WorkerSelection("s")}}),
			`default host "s" is not a registered worker-selection type (register selections before the hints they host)`},
		{"selection", cat.RegisterSelection(hints.SelectionProvider{Type: "s", Parse: sel}), ""},
		{"hint", cat.RegisterHint(hints.HintProvider{Type: "a", Parse: nopParse, DefaultHosts: []hints.HintHost{hints.WorkerSelection("s")}}), ""},
		{"second hint", cat.RegisterHint(hints.HintProvider{Type: "b", Parse: nopParse, DefaultHosts: []hints.HintHost{hints.AnyWorkerSelection}}), ""},
		{"opt-in hint", cat.RegisterHint(hints.HintProvider{Type: "c", Parse: nopParse}), ""},
		{"duplicate hint", cat.RegisterHint(hints.HintProvider{Type: "a", Parse: nopParse}), `hint policy type "a" is already registered`},
		{"no parse", cat.RegisterHint(hints.HintProvider{Type: "d"}), "Parse is nil"},
		{"bad name", cat.RegisterHint(hints.HintProvider{Type: "Bad Name", Parse: nopParse}), "must be a policy type name"},
		{"Dynamo's spelling", hints.CheckTypeName("harness_prefetch"), ""},
		{"a type name ends with a letter or digit", hints.CheckTypeName("prefetch_"), "must be a policy type name"},
		{"duplicate selection", cat.RegisterSelection(hints.SelectionProvider{Type: "s", Parse: sel}), `worker-selection type "s" is already registered`},
		{"hint and selection may share a name", cat.RegisterSelection(hints.SelectionProvider{Type: "a", Parse: sel}), ""},
	}
	for _, s := range steps {
		got := ""
		if s.err != nil {
			got = s.err.Error()
		}
		if s.wantErr == "" && s.err != nil || s.wantErr != "" && !strings.Contains(got, s.wantErr) {
			t.Errorf("%s: err = %v; want %q", s.name, s.err, s.wantErr)
		}
	}
	defaults := func(sel string) []string {
		var out []string
		for _, p := range cat.DefaultHints(sel) {
			out = append(out, p.Type)
		}
		return out
	}
	if diff := cmp.Diff([]string{"a", "b"}, defaults("s")); diff != "" {
		t.Errorf("defaults under s (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b"}, defaults("other")); diff != "" {
		t.Errorf("defaults under other (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, cat.HintTypes()); diff != "" {
		t.Errorf("HintTypes (-want +got):\n%s", diff)
	}
}

// TestCatalogRefusesDefaultsThatCannotWork: registration refuses a default
// that would make every role running its selection's defaults invalid, and
// SetDefaultHosts is the supported way to make room.
func TestCatalogRefusesDefaultsThatCannotWork(t *testing.T) {
	sel := func(hints.Params) (hints.SelectionPolicy, error) { return nil, nil }
	needsLimit := func(raw hints.Params) (hints.HintPolicy, error) {
		var p struct {
			Limit *int `json:"limit"`
		}
		if err := hints.DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		if p.Limit == nil {
			return nil, hints.ParamErrorf("limit", "is required")
		}
		return nopParse(raw)
	}
	kvcr := []hints.HintHost{hints.WorkerSelection("kvcr")}
	newCat := func(t *testing.T) *hints.Catalog {
		cat := hints.NewCatalog()
		for _, s := range []string{"kvcr", "other"} {
			if err := cat.RegisterSelection(hints.SelectionProvider{Type: s, Parse: sel}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cat.RegisterHint(hints.HintProvider{Type: "kv-fetch", Commitments: hints.KVCopy, DefaultHosts: kvcr, Parse: nopParse}); err != nil {
			t.Fatal(err)
		}
		return cat
	}
	for _, tc := range []struct {
		name string
		p    hints.HintProvider
		want string
	}{
		{"second default KVCopy sender", hints.HintProvider{Type: "copy-audit", Commitments: hints.KVCopy, DefaultHosts: kvcr, Parse: nopParse},
			`"copy-audit" declares KVCopy and would run by default under worker-selection kvcr, where "kv-fetch" already sends the committed KV copy by default`},
		{"second KVCopy sender under any selection", hints.HintProvider{Type: "copy-audit", Commitments: hints.KVCopy, DefaultHosts: []hints.HintHost{hints.AnyWorkerSelection}, Parse: nopParse},
			"Catalog.SetDefaultHosts"},
		{"default that needs a parameter", hints.HintProvider{Type: "limited", DefaultHosts: kvcr, Parse: needsLimit},
			`its Parse refuses no parameters, which is what a role that leaves hints out runs it with: parameter "limit": is required`},
		{"default whose Parse panics", hints.HintProvider{Type: "panics", DefaultHosts: kvcr, Parse: func(hints.Params) (hints.HintPolicy, error) { panic("boom") }},
			"Parse panicked: boom"},
		{"host naming no selection", hints.HintProvider{Type: "typo", DefaultHosts: []hints.HintHost{hints.WorkerSelection("kvcrr")}, Parse: nopParse},
			`default host "kvcrr" is not a registered worker-selection type`},
		{"zero host", hints.HintProvider{Type: "zero", DefaultHosts: []hints.HintHost{{}}, Parse: nopParse},
			"a default host names no worker-selection type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := newCat(t)
			err := cat.RegisterHint(tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RegisterHint: %v; want an error containing %q", err, tc.want)
			}
			if _, ok := cat.Hint(tc.p.Type); ok {
				t.Errorf("the refused type %s is registered", tc.p.Type)
			}
		})
	}

	t.Run("opt-in policies are not held to the defaults' rules", func(t *testing.T) {
		cat := newCat(t)
		if err := cat.RegisterHint(hints.HintProvider{Type: "copy-audit", Commitments: hints.KVCopy, Parse: needsLimit}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("SetDefaultHosts makes room for a build's own sender", func(t *testing.T) {
		cat := newCat(t)
		if err := cat.SetDefaultHosts("kv-fetch"); err != nil {
			t.Fatal(err)
		}
		if err := cat.RegisterHint(hints.HintProvider{Type: "copy-audit", Commitments: hints.KVCopy, DefaultHosts: kvcr, Parse: nopParse}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range cat.DefaultHints("kvcr") {
			got = append(got, p.Type)
		}
		if diff := cmp.Diff([]string{"copy-audit"}, got); diff != "" {
			t.Errorf("kvcr defaults (-want +got):\n%s", diff)
		}
		// Putting kv-fetch back is held to the same rule.
		if err := cat.SetDefaultHosts("kv-fetch", kvcr...); err == nil || !strings.Contains(err.Error(), `"copy-audit" already sends`) {
			t.Errorf("SetDefaultHosts(kv-fetch, kvcr) = %v; want the duplicate-sender refusal", err)
		}
		if err := cat.SetDefaultHosts("kv-fetch", hints.WorkerSelection("other")); err != nil {
			t.Errorf("SetDefaultHosts(kv-fetch, other): %v", err)
		}
		if err := cat.SetDefaultHosts("nope"); err == nil || !strings.Contains(err.Error(), `"nope" is not registered`) {
			t.Errorf("SetDefaultHosts(nope) = %v", err)
		}
	})

	t.Run("what the catalog returns is a copy", func(t *testing.T) {
		cat := newCat(t)
		p, _ := cat.Hint("kv-fetch")
		p.DefaultHosts = nil
		p.Commitments = 0
		if got := cat.DefaultHints("kvcr"); len(got) != 1 || got[0].Type != "kv-fetch" || !got[0].Commitments.Has(hints.KVCopy) {
			t.Errorf("changing what Hint returned changed the catalog: defaults %v", got)
		}
	})
}
