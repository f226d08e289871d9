package filecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestValidate: a hints YAML file with no role is a NoRoles warning, an
// unreadable file a ReadError, a RouterRole that breaks a rule an error
// at the line of its field, and a manifest with no RouterRole nor
// HintPolicy a NoObjects warning.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty.yaml", "worker_selection:\n  instances:\n    - {name: rr, type: dynamo-round-robin}\n")
	role := write("role.yaml", "apiVersion: hints.kvrouter.io/v1alpha1\nkind: RouterRole\nmetadata:\n  name: decode\nspec:\n  router: llama\n  role: decode\n"+
		"  workerSelection:\n    type: dynamo-default-cost-fn\n  hints:\n    - type: kv-teleport\n")
	missing := filepath.Join(dir, "missing.yaml")
	cat := builtin.NewCatalog()

	res := Validate(cat, []string{empty, missing, role}, hintsconfig.Modes{}, FileRead{}, "", nil)
	if !res.Invalid || !res.Unreadable {
		t.Errorf("Invalid %v, Unreadable %v; want both", res.Invalid, res.Unreadable)
	}
	var got []string
	for _, p := range res.Problems {
		got = append(got, p.Text())
	}
	want := []string{
		empty + ": config: NoRoles (warning): the file holds no role",
		missing + ": ReadError: open " + missing,
		role + ":11: RouterRole decode spec.hints[0] (kv-teleport): UnknownHintType: ",
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d is\n  %s\nwant it to start with\n  %s", i, got[i], want[i])
		}
	}

	cm := write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
	res = Validate(cat, []string{cm}, hintsconfig.Modes{}, FileRead{}, "", nil)
	if res.Invalid || len(res.Problems) != 1 || res.Problems[0].Reason != ReasonNoObjects {
		t.Errorf("a manifest of a ConfigMap alone: %+v", res)
	}
}
