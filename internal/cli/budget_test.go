package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// manyRulesCatalog writes a declaration of types hint types with rules
// CEL rules each (the many-rules shape of issue 28) into a file.
func manyRulesCatalog(t *testing.T, types, rules int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\nworkerSelections:\n  - type: pick\nhints:\n")
	for i := range types {
		fmt.Fprintf(&b, "  - type: hint-%d\n    parameters:\n      type: object\n      properties:\n        a: {type: integer, default: 1}\n      x-kubernetes-validations:\n", i)
		for r := range rules {
			fmt.Fprintf(&b, "        - rule: self.a + %d > 0\n", r)
		}
	}
	f := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCatalogBudgetFlags: validate --catalog refuses a declaration over
// the budget with the limit, the figures and the flag named, exit 2, and
// the flags raise the limits (or a wrong quantity is a usage error).
func TestCatalogBudgetFlags(t *testing.T) {
	many := manyRulesCatalog(t, 4, 20)
	const in = "testdata/golden/declared-valid.in.yaml"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"validate", "--catalog", many, "-f", in}, ExitUsage,
			many + ":6: hints[0]: InvalidCatalog: declares 20 CEL rules, over the budget of 16 rules per type (--catalog-max-rules-per-type)"},
		{[]string{"validate", "--catalog", many, "--catalog-max-rules-per-type", "20", "--catalog-max-rules", "79", "-f", in}, ExitUsage,
			"InvalidCatalog: the declaration holds 80 CEL rules in 5 types, over the budget of 79 (--catalog-max-rules)"},
		{[]string{"validate", "--catalog", many, "--catalog-max-bytes", "1Ki", "-f", in}, ExitUsage,
			"over the budget of 1024 (--catalog-max-bytes)"},
		{[]string{"catalog", "--catalog", many, "--catalog-max-rules-per-type", "20"}, ExitOK, "hint-3"},
		{[]string{"compile", "--catalog", many, "--catalog-max-memory", "lots", "-f", in}, ExitUsage, "want a quantity of bytes such as 8Mi"},
	} {
		code, out, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("kvhint %s: exit %d\n%s%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.want)
		}
	}
}
