package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/filecheck"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

const samples = "../../config/samples"

func sampleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(samples, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			out = append(out, "-f", f)
		}
	}
	return out
}

func TestValidateSampleManifests(t *testing.T) {
	code, out, errOut := runCLI(append([]string{"validate"}, sampleFiles(t)...)...)
	if code != ExitOK || out != "3 file(s) valid\n" || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestValidateInvalidSamples runs every invalid sample through `kvhint
// validate`: each breaks the rule its name says, with the reason the
// manager's condition carries (or, for the rules the API server enforces,
// the reason of the same rule in the hints core), at FILE:LINE of the
// field concerned.
func TestValidateInvalidSamples(t *testing.T) {
	want := map[string]string{
		"duplicate-hint-name.yaml":      "26: RouterRole duplicate-hint-name spec.hints[1] (HintPolicy retain-long, kv-retain): DuplicateHintName: ",
		"duplicate-names.yaml":          "16: RouterRole duplicate-names spec.hints[1] (kv-retain): DuplicateHintName: ",
		"hintpolicy-invalid.yaml":       "23: RouterRole hintpolicy-invalid spec.hints[0] (HintPolicy retain-typo, kv-retain): HintPolicyInvalid: ",
		"hintpolicy-not-found.yaml":     "14: RouterRole hintpolicy-not-found spec.hints[0]: HintPolicyNotFound: ",
		"hints-require-kv-mode.yaml":    "14: RouterRole hints-require-kv-mode spec.hints: HintsRequireKVMode: ",
		"invalid-hint-name.yaml":        "13: RouterRole invalid-hint-name spec.hints[0] (kv-retain): InvalidHintName: ",
		"invalid-parameters.yaml":       "15: RouterRole invalid-parameters spec.hints[0] (kv-retain): InvalidParameters: ",
		"invalid-role.yaml":             "10: RouterRole invalid-role spec.role: InvalidRole: ",
		"invalid-router-mode.yaml":      "10: RouterRole invalid-router-mode spec.routerMode: InvalidRouterMode: ",
		"invalid-worker-selector.yaml":  "12: RouterRole invalid-worker-selector spec.workerSelector: InvalidWorkerSelector: ",
		"kvcopy-sender-duplicate.yaml":  "12: RouterRole kvcopy-sender-duplicate spec.hints (kvcr): KVCopySenderDuplicate: ",
		"kvcopy-sender-missing.yaml":    "14: RouterRole kvcopy-sender-missing spec.hints (kvcr): KVCopySenderMissing: ",
		"role-conflict.yaml":            "21: RouterRole conflict-second spec.role: RoleConflict: ",
		"too-many-hints.yaml":           "12: RouterRole too-many-hints spec.hints: TooManyHints: ",
		"type-and-policyref.yaml":       "13: RouterRole type-and-policyref spec.hints[0]: InvalidConfig: ",
		"unknown-hint-type.yaml":        "13: RouterRole unknown-hint-type spec.hints[0] (kv-teleport): UnknownHintType: ",
		"unknown-worker-selection.yaml": "12: RouterRole unknown-worker-selection spec.workerSelection.type (kv-oracle): UnknownWorkerSelection: ",
	}
	files, err := filepath.Glob(filepath.Join(samples, "invalid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid samples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			w, ok := want[filepath.Base(f)]
			if !ok {
				t.Fatalf("no expectation for %s", f)
			}
			code, out, _ := runCLI("validate", "-f", f)
			if code != ExitInvalid || !strings.Contains(out, f+":"+w) {
				t.Errorf("exit %d; want %d and a line starting %q:\n%s", code, ExitInvalid, f+":"+w, out)
			}
		})
	}
}

// TestCompileManifestsMatchesTheManager compiles the samples with the CLI
// and with the compile step the manager runs: same config, same hash.
func TestCompileManifestsMatchesTheManager(t *testing.T) {
	code, out, errOut := runCLI(append([]string{"compile"}, sampleFiles(t)...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var in rolegraph.Input
	for _, f := range []string{"disaggregated.yaml", "session-decode.yaml", "non-kv.yaml"} {
		data, err := os.ReadFile(filepath.Join(samples, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := rolegraph.ReadManifests(data, &in); err != nil {
			t.Fatal(err)
		}
	}
	routers := rolegraph.Compile(builtin.NewCatalog(), in).Routers
	if len(routers) != 3 {
		t.Fatalf("%d routers; want llama, chat and embed", len(routers))
	}
	// Standard output is the configs, exactly the bytes of each ConfigMap's
	// hints.yaml, separated by ---; standard error says which is which.
	var want []string
	for _, r := range routers {
		want = append(want, string(r.Config))
		if note := "router " + r.Name + ": ConfigMap " + v1alpha1.HintsConfigMapName(r.Name) + ", key hints.yaml (with roles.yaml, hash " + r.Hash + " over both)"; !strings.Contains(errOut, note) {
			t.Errorf("compile's standard error lacks %q:\n%s", note, errOut)
		}
		if r.Hash != compiled.Hash(r.ConfigMap.Data) {
			t.Errorf("router %s: hash %s is not the content hash", r.Name, r.Hash)
		}
		// The samples compile to files Dynamo's router takes.
		if err := dynamopolicy.Check(r.Config); err != nil {
			t.Errorf("router %s: Dynamo's router would refuse the compiled hints.yaml: %v\n%s", r.Name, err, r.Config)
		}
	}
	if got := strings.Split(out, "---\n"); !slices.Equal(got, want) {
		t.Errorf("compile output:\n%s\nwant the three configs, each as the ConfigMap holds it:\n%s", out, strings.Join(want, "---\n"))
	}
	for _, r := range routers {
		code, out, errOut := runCLI(append([]string{"compile", "--router", r.Name}, sampleFiles(t)...)...)
		if code != ExitOK || out != string(r.Config) {
			t.Errorf("compile --router %s: exit %d, output:\n%s\nwant exactly:\n%s\n%s", r.Name, code, out, r.Config, errOut)
		}
	}
	if code, _, errOut := runCLI(append([]string{"compile", "--router", "nope"}, sampleFiles(t)...)...); code != ExitUsage || !strings.Contains(errOut, `no router "nope"`) {
		t.Errorf("compile --router nope: exit %d: %s", code, errOut)
	}
}

// TestManifestsAcrossFiles resolves a policyRef in one file to a
// HintPolicy in another, and mixes in a hints YAML file.
func TestManifestsAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	policy := write("policy.yaml", `apiVersion: hints.kvrouter.io/v1alpha1
kind: HintPolicy
metadata: {name: retain, namespace: chat}
spec: {type: kv-retain, parameters: {ttl_seconds: 60}}
`)
	role := write("role.yaml", `# a comment before the first document
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: chat}
---
apiVersion: hints.kvrouter.io/v1alpha1
kind: RouterRole
metadata: {name: decode, namespace: chat}
spec:
  router: chat
  role: decode
  workerSelection: {type: dynamo-default-cost-fn}
  hints: [{policyRef: {name: retain}}]
`)
	plain := write("hints.yaml", "worker_selection:\n  decode: dynamo-default-cost-fn\n")

	if code, out, errOut := runCLI("validate", "-f", role, "-f", policy, "-f", plain); code != ExitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	code, out, _ := runCLI("validate", "-f", role)
	if want := role + `:14: RouterRole chat/decode spec.hints[0]: HintPolicyNotFound: HintPolicy "retain" does not exist in namespace "chat"`; code != ExitInvalid || !strings.Contains(out, want) {
		t.Errorf("without the policy file: exit %d\n%s\nwant a line starting %q", code, out, want)
	}
	code, out, errOut := runCLI("compile", "-f", role, "-f", policy)
	if code != ExitOK || !strings.Contains(errOut, "# router chat in namespace chat: ConfigMap chat-hints") || !strings.Contains(out, "ttl_seconds: 60") {
		t.Errorf("compile: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestManifestReadErrors: documents that cannot be read are reported with
// their number, and never stop the others from being checked.
func TestManifestReadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{
			name: "unknown field",
			doc:  "apiVersion: hints.kvrouter.io/v1alpha1\nkind: RouterRole\nmetadata: {name: x}\nspec: {router: r, role: decode, workerSelection: {type: kvcr}, hintz: []}\n",
			want: `-:1: document 1: InvalidConfig: RouterRole: json: unknown field "hintz"`,
		},
		{
			name: "wrong type",
			doc:  "apiVersion: hints.kvrouter.io/v1alpha1\nkind: RouterRole\nmetadata: {name: x}\nspec: 5\n",
			want: "-:1: document 1: InvalidConfig: RouterRole: json: cannot unmarshal number into Go struct field RouterRole.spec",
		},
		{
			name: "another version",
			doc:  "apiVersion: hints.kvrouter.io/v2\nkind: RouterRole\nmetadata: {name: x}\n",
			want: "-:1: document 1: InvalidConfig: apiVersion hints.kvrouter.io/v2 is not served by this build; use hints.kvrouter.io/v1alpha1",
		},
		{
			name: "no name",
			doc:  "apiVersion: hints.kvrouter.io/v1alpha1\nkind: HintPolicy\nspec: {type: kv-evict}\n",
			want: "-:1: HintPolicy: InvalidConfig: metadata.name is required",
		},
		{
			name: "second document broken, first still checked",
			doc:  "apiVersion: hints.kvrouter.io/v1alpha1\nkind: HintPolicy\nmetadata: {name: p}\nspec: {type: kv-teleport}\n---\napiVersion: hints.kvrouter.io/v1alpha1\nkind: Router\n",
			want: "-:6: document 2: InvalidConfig: kind Router is not part of hints.kvrouter.io/v1alpha1; known: RouterRole, HintPolicy\n-:4: HintPolicy p spec.type (kv-teleport): UnknownHintType:",
		},
		{
			name: "a List",
			doc:  "apiVersion: v1\nkind: List\nitems:\n- apiVersion: hints.kvrouter.io/v1alpha1\n  kind: HintPolicy\n  metadata: {name: p}\n  spec: {type: kv-retain, parameters: {ttl_seconds: -1}}\n",
			want: `-:7: HintPolicy p spec.parameters (kv-retain): InvalidParameters: parameter "ttl_seconds": -1 is out of range 1..86400`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRootCommand(builtin.NewCatalog())
			var out, errb bytes.Buffer
			root.SetArgs([]string{"validate", "-f", "-"})
			root.SetIn(strings.NewReader(tc.doc))
			root.SetOut(&out)
			root.SetErr(&errb)
			err := root.Execute()
			if ee, ok := err.(exitError); !ok || ee.code != ExitInvalid {
				t.Fatalf("got %v; want exit %d\n%s", err, ExitInvalid, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output:\n%s\nwant it to contain:\n%s", out.String(), tc.want)
			}
		})
	}
}

// FuzzValidateManifests feeds manifests to `kvhint validate`: whatever
// the input, it answers with an exit code, never a panic.
func FuzzValidateManifests(f *testing.F) {
	for _, glob := range []string{filepath.Join(samples, "*.yaml"), filepath.Join(samples, "invalid", "*.yaml"), "../rolegraph/testdata/*.in.yaml"} {
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
		for _, sub := range []string{"validate", "compile"} {
			root := NewRootCommand(cat)
			var out, errb bytes.Buffer
			root.SetArgs([]string{sub, "-f", "-"})
			root.SetIn(bytes.NewReader(data))
			root.SetOut(&out)
			root.SetErr(&errb)
			if err := root.Execute(); err != nil {
				if _, ok := err.(exitError); !ok {
					t.Fatalf("%s returned %v", sub, err)
				}
			}
		}
	})
}

// TestManifestParameterProblemsPointAtTheKey: in RouterRole and HintPolicy
// manifests, a parameter problem's line is the key's, and the JSON report
// names the key, as it does for a hints YAML. Before, the line was the hint
// item's and the JSON had no key.
func TestManifestParameterProblemsPointAtTheKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "objects.yaml")
	doc := `apiVersion: hints.kvrouter.io/v1alpha1
kind: RouterRole
metadata: {name: decode, namespace: chat}
spec:
  router: chat
  role: decode
  workerSelection: {type: dynamo-default-cost-fn}
  hints:
  - type: kv-retain
    parameters:
      priority: 10
      ttl_seconds: 0
---
apiVersion: hints.kvrouter.io/v1alpha1
kind: HintPolicy
metadata: {name: retain, namespace: chat}
spec:
  type: kv-retain
  parameters:
    ttl_seconds: 60
    priority: 500
`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("validate", "-o", "json", "-f", file)
	if code != ExitInvalid {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	var rep struct {
		Problems []filecheck.Problem `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	type place struct {
		Object, Key string
		Line        int
	}
	var got []place
	for _, p := range rep.Problems {
		got = append(got, place{p.Object, p.Key, p.Line})
	}
	want := []place{{"RouterRole chat/decode", "ttl_seconds", 12}, {"HintPolicy chat/retain", "priority", 21}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\n%s", diff, out)
	}
}
