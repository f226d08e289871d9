package rolegraph

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current output")

// now is the clock of every golden case.
var now = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// golden is the rendered output of a case: what the manager would write.
type golden struct {
	Routers      []goldenRouter `json:"routers,omitempty"`
	RouterRoles  []goldenObject `json:"routerRoles,omitempty"`
	HintPolicies []goldenObject `json:"hintPolicies,omitempty"`
}

type goldenRouter struct {
	Name      string   `json:"name"`
	Hash      string   `json:"hash"`
	Notes     []string `json:"notes,omitempty"`
	Conflict  string   `json:"conflict,omitempty"`
	ConfigMap any      `json:"configMap"`
	// Revision is the immutable copy restart-mode workloads mount.
	Revision any `json:"revision,omitempty"`
}

type goldenObject struct {
	Name     string   `json:"name"`
	Findings []string `json:"findings,omitempty"`
	Status   any      `json:"status"`
}

// TestCompileGolden compiles testdata/<case>.in.yaml and compares the
// result with testdata/<case>.out.yaml; -update rewrites the latter.
func TestCompileGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	cat := builtin.NewCatalog()
	for _, inPath := range ins {
		name := strings.TrimSuffix(filepath.Base(inPath), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(inPath)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Now: now}
			if err := ReadManifests(data, &in); err != nil {
				t.Fatalf("reading %s: %v", inPath, err)
			}
			out := Compile(cat, in)
			checkConfigsParse(t, cat, out)
			got, err := yaml.Marshal(render(out))
			if err != nil {
				t.Fatal(err)
			}
			outPath := strings.TrimSuffix(inPath, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(outPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(outPath)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/rolegraph -run Golden -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got); run with -update if the change is intended:\n%s", outPath, diff)
			}
		})
	}
}

// checkConfigsParse holds every compiled config to the sidecar's own
// all-or-nothing check, through the same decode, and the hash annotation
// to the content.
func checkConfigsParse(t *testing.T, cat *hints.Catalog, out *Output) {
	t.Helper()
	for _, r := range out.Routers {
		if r.Conflict != "" {
			continue
		}
		dec, err := compiled.Decode(r.ConfigMap.Data)
		if err != nil {
			t.Errorf("router %s: compiled config does not decode: %v", r.Name, err)
			continue
		}
		if _, probs := hintsconfig.Compile(cat, dec.Parsed, dec.Modes()); probs.HasErrors() {
			t.Errorf("router %s: compiled config breaks a rule: %v", r.Name, probs)
		}
		if got := r.ConfigMap.Annotations[v1alpha1.HashAnnotation]; got != dec.Hash || got != r.Hash {
			t.Errorf("router %s: hash annotation %q does not match the content (%s)", r.Name, got, dec.Hash)
		}
		if r.Config != nil {
			checkDynamoPolicyFile(t, r.Name, r.Config)
		}
		if r.Config != nil && len(r.Workloads) > 0 && dec.Parsed.Form == hintsconfig.FormRouterWideHint {
			// No golden case declares a catalog: a restart-mode router's
			// Frontend is a stock Dynamo build, and starts on the file
			// as Dynamo's own checks read it.
			if _, probs := hintsconfig.CompileFor(cat, r.Config, hintsconfig.TargetDynamo, dec.Modes()); probs.HasErrors() {
				t.Errorf("router %s: a stock Dynamo Frontend refuses the file: %v\n%s", r.Name, probs, r.Config)
			}
		}
	}
}

func render(out *Output) golden {
	var g golden
	for _, r := range out.Routers {
		g.Routers = append(g.Routers, goldenRouter{Name: r.Name, Hash: r.Hash, Notes: r.Notes, Conflict: r.Conflict, ConfigMap: r.ConfigMap, Revision: revisionOrNil(r)})
	}
	for _, r := range out.RouterRoles {
		g.RouterRoles = append(g.RouterRoles, goldenObject{Name: r.Name, Findings: strs(r.Findings), Status: r.Status})
	}
	for _, r := range out.HintPolicies {
		g.HintPolicies = append(g.HintPolicies, goldenObject{Name: r.Name, Findings: strs(r.Findings), Status: r.Status})
	}
	return g
}

func revisionOrNil(r *Router) any {
	if r.Revision == nil {
		return nil
	}
	return r.Revision
}

func strs(fs Findings) []string {
	var out []string
	for _, f := range fs {
		s := f.String()
		if f.Severity == hintsconfig.SeverityWarning {
			s = "warning: " + s
		}
		out = append(out, s)
	}
	return out
}

// checkDynamoPolicyFile holds a compiled policy file to the schema Dynamo's
// router reads it with (unknown keys refused at every level), a model
// written apart from the hints core.
func checkDynamoPolicyFile(t *testing.T, router string, doc []byte) {
	t.Helper()
	if err := dynamopolicy.Check(doc); err != nil {
		t.Errorf("router %s: Dynamo's router would refuse the compiled hints.yaml: %v\n%s", router, err, doc)
	}
}

// BenchmarkCompileGolden compiles every golden case's input once per
// iteration: the walk of each RouterRole through the hints core, and of
// each router's config.
func BenchmarkCompileGolden(b *testing.B) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		b.Fatalf("no golden cases: %v", err)
	}
	cat := builtin.NewCatalog()
	inputs := make([]Input, 0, len(ins))
	for _, inPath := range ins {
		data, err := os.ReadFile(inPath)
		if err != nil {
			b.Fatal(err)
		}
		in := Input{Now: now}
		if err := ReadManifests(data, &in); err != nil {
			b.Fatalf("reading %s: %v", inPath, err)
		}
		inputs = append(inputs, in)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, in := range inputs {
			Compile(cat, in)
		}
	}
}
