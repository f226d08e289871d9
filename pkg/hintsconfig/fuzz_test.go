package hintsconfig_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// FuzzCompile feeds arbitrary bytes through parse, rules and encoding. Beyond
// "never panics" it checks the property the sidecar relies on: what Compile
// emits is itself a valid configuration that compiles to the same bytes.
func FuzzCompile(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	cat := builtin.NewCatalog()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := hintsconfig.ParseConfig(data)
		if err != nil {
			probs, ok := err.(hintsconfig.Problems)
			if !ok || len(probs) == 0 {
				t.Fatalf("ParseConfig error %T %v; want non-empty Problems", err, err)
			}
			for _, p := range probs {
				if p.Message == "" || p.Reason == "" {
					t.Fatalf("problem without a reason or message: %+v", p)
				}
			}
			return
		}
		g, probs := hintsconfig.Compile(cat, cfg, hintsconfig.Modes{})
		for _, p := range probs {
			if p.Message == "" || p.Reason == "" {
				t.Fatalf("problem without a reason or message: %+v", p)
			}
			if _, ok := g.Role(p.Role); ok && p.Severity == hintsconfig.SeverityError {
				t.Fatalf("role %q kept despite error %v", p.Role, p)
			}
		}
		if len(g.Roles) == 0 && len(g.Unchecked) == 0 {
			// Nothing to write: a router with no role gets no policy
			// file (Dynamo's router refuses an empty one).
			return
		}
		doc, hash, err := g.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		cfg2, err := hintsconfig.ParseConfig(doc)
		if err != nil {
			t.Fatalf("compiled output does not parse: %v\n%s", err, doc)
		}
		g2, probs2 := hintsconfig.Compile(cat, cfg2, hintsconfig.Modes{})
		if probs2.HasErrors() {
			t.Fatalf("compiled output breaks rules: %v\n%s", probs2, doc)
		}
		doc2, hash2, err := g2.Encode()
		if err != nil {
			t.Fatalf("Encode of recompiled: %v", err)
		}
		if hash != hash2 || !bytes.Equal(doc, doc2) {
			t.Fatalf("compile is not a fixed point:\n%s\n---\n%s", doc, doc2)
		}
	})
}
