package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// FuzzValidate runs `kvhint validate -f -` on arbitrary input: it must never
// panic, must exit 0 or 1 (never a usage error for readable input), and must
// say something either way.
func FuzzValidate(f *testing.F) {
	for _, glob := range []string{"testdata/golden/*.in.yaml", "testdata/fuzz-seeds/*.yaml"} {
		paths, _ := filepath.Glob(glob)
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	cat := builtin.NewCatalog()
	f.Fuzz(func(t *testing.T, data []byte) {
		root := NewRootCommand(cat)
		var out, errb bytes.Buffer
		root.SetArgs([]string{"validate", "-f", "-"})
		root.SetIn(bytes.NewReader(data))
		root.SetOut(&out)
		root.SetErr(&errb)
		err := root.Execute()
		code := ExitOK
		if ee, ok := err.(exitError); ok {
			code = ee.code
		} else if err != nil {
			t.Fatalf("validate returned %v", err)
		}
		if code != ExitOK && code != ExitInvalid {
			t.Fatalf("exit %d for readable input\n%s%s", code, out.String(), errb.String())
		}
		if out.Len() == 0 {
			t.Fatalf("exit %d with nothing printed", code)
		}
	})
}
