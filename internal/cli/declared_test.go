package cli

import (
	"strings"
	"testing"
)

// TestDeclaredCatalogOnlyWhereChecked: --catalog is taken by the commands
// that check (validate, compile, catalog) and by no command that runs
// policies: the sidecar runs the catalog its binary links, so a declared
// type can never be run, only checked.
func TestDeclaredCatalogOnlyWhereChecked(t *testing.T) {
	const decl = "../declared/testdata/custom-router.yaml"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"catalog", "--catalog", decl}, ExitOK, "harness_prefetch  KVCopy       kv-share"},
		{[]string{"validate", "--catalog", decl, "-f", "testdata/golden/declared-valid.in.yaml"}, ExitOK, "1 file(s) valid"},
		{[]string{"validate", "-f", "testdata/golden/declared-valid.in.yaml"}, ExitInvalid, `UnknownWorkerSelection: worker-selection type "kv-share" is not linked into this build`},
		{[]string{"validate", "--catalog", "testdata/no-such-catalog.yaml", "-f", "testdata/golden/declared-valid.in.yaml"}, ExitUsage, "--catalog testdata/no-such-catalog.yaml: open"},
		{[]string{"sidecar", "--catalog", decl}, ExitUsage, "unknown flag: --catalog"},
		{[]string{"manager", "--catalog", decl}, ExitUsage, "unknown flag: --catalog"},
	} {
		code, out, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("kvhint %s: exit %d\n%s%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.want)
		}
	}
}
