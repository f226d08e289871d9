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
		{"hint", cat.RegisterHint(hints.HintProvider{Type: "a", Parse: nopParse, DefaultHosts: []hints.HintHost{hints.WorkerSelection("s")}}), ""},
		{"second hint", cat.RegisterHint(hints.HintProvider{Type: "b", Parse: nopParse, DefaultHosts: []hints.HintHost{hints.AnyWorkerSelection}}), ""},
		{"opt-in hint", cat.RegisterHint(hints.HintProvider{Type: "c", Parse: nopParse}), ""},
		{"duplicate hint", cat.RegisterHint(hints.HintProvider{Type: "a", Parse: nopParse}), `hint policy type "a" is already registered`},
		{"no parse", cat.RegisterHint(hints.HintProvider{Type: "d"}), "Parse is nil"},
		{"bad name", cat.RegisterHint(hints.HintProvider{Type: "Bad Name", Parse: nopParse}), "DNS label"},
		{"selection", cat.RegisterSelection(hints.SelectionProvider{Type: "s", Parse: sel}), ""},
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
