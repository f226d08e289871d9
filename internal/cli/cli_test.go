package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

var update = flag.Bool("update", false, "rewrite the golden *.out.yaml files")

// runCLI runs kvhint in-process and returns its exit code and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(builtin.NewCatalog(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestGolden runs validate and compile on every testdata/golden/*.in.yaml
// and compares a transcript with *.out.yaml: validate's report and exit code
// as comments, then compile's output.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/golden/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			flags := goldenFlags(t, in)
			code, out, errOut := runCLI(append([]string{"validate", "-f", in}, flags...)...)
			fmt.Fprintf(&b, "# kvhint validate: exit %d\n", code)
			writeComment(&b, out+errOut)
			code, out, errOut = runCLI(append([]string{"compile", "-f", in}, flags...)...)
			fmt.Fprintf(&b, "# kvhint compile: exit %d\n", code)
			writeComment(&b, errOut)
			b.WriteString(out)
			got := b.String()
			if code == ExitOK && out != "" {
				// What compile prints is the file Dynamo's router reads:
				// held to a model of its schema written apart from ours.
				check := dynamopolicy.Check
				if strings.Contains(strings.Join(flags, " "), "RouterWideHint") || strings.Contains(out, "kv_hint_policy:") {
					// The released form: held to the model of what a
					// released Frontend reads.
					check = dynamopolicy.CheckReleased
				}
				for i, doc := range strings.Split(out, "\n---\n") {
					if err := check([]byte(doc)); err != nil {
						t.Errorf("compiled document %d: Dynamo's router would refuse it: %v\n%s", i+1, err, doc)
					}
				}
			}

			golden := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/cli -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// goldenFlags reads the extra flags of a golden case from its first line,
// "# flags: --router-mode round-robin".
func goldenFlags(t *testing.T, in string) []string {
	t.Helper()
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	if rest, ok := strings.CutPrefix(first, "# flags:"); ok {
		return strings.Fields(rest)
	}
	return nil
}

func writeComment(b *strings.Builder, text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line != "" {
			b.WriteString("#   " + line + "\n")
		}
	}
}

func TestCompileIsDeterministic(t *testing.T) {
	in := "testdata/golden/design-sample.in.yaml"
	_, first, _ := runCLI("compile", "-f", in)
	for i := 0; i < 20; i++ {
		if _, again, _ := runCLI("compile", "-f", in); again != first {
			t.Fatalf("run %d differs:\n%s\n---\n%s", i, first, again)
		}
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"valid", []string{"validate", "-f", "testdata/golden/design-sample.in.yaml"}, ExitOK, "1 file(s) valid", ""},
		{"valid with warnings", []string{"validate", "-f", "testdata/golden/kvcr-defaults.in.yaml"}, ExitOK, "KVCopySenderUnused (warning)", ""},
		{"invalid", []string{"validate", "-f", "testdata/golden/every-rule.in.yaml"}, ExitInvalid, "role decode (kvcr): KVCopySenderDuplicate", ""},
		{"one invalid among valid files", []string{"validate", "-f", "testdata/golden/design-sample.in.yaml", "-f", "testdata/golden/unknown-keys.in.yaml"}, ExitInvalid, "unknown-keys.in.yaml:4: role decode: InvalidConfig", ""},
		{"missing file", []string{"validate", "-f", filepath.Join(dir, "nope.yaml")}, ExitUsage, "", "no such file"},
		{"oversize file", []string{"validate", "-f", big}, ExitUsage, "", "larger than the 1048576-byte limit"},
		{"no -f", []string{"validate"}, ExitUsage, "", "give one or more -f FILE"},
		{"a directory of manifests", []string{"validate", "-f", "../../config/samples"}, ExitOK, "4 file(s) valid", ""},
		{"a directory of invalid manifests", []string{"validate", "-f", "../../config/samples/invalid"}, ExitInvalid, "invalid/too-many-hints.yaml", ""},
		{"a directory without YAML", []string{"validate", "-f", dir}, ExitUsage, "", "no .yaml, .yml or .json files"},
		{"unknown flag", []string{"validate", "--nope"}, ExitUsage, "", "unknown flag"},
		{"compile invalid", []string{"compile", "-f", "testdata/golden/hints-off-kv.in.yaml", "--router-mode", "round-robin"}, ExitInvalid, "", "HintsRequireKVMode"},
		{"an unknown router mode", []string{"validate", "-f", "testdata/golden/design-sample.in.yaml", "--router-mode", "fastest"}, ExitUsage, "", "not a router mode"},
		{"--router-mode is for a policy file", []string{"sidecar", "--router", "llama", "--router-mode", "kv"}, ExitUsage, "", "--router-mode is for --config-file"},
		{"compile missing file", []string{"compile", "-f", filepath.Join(dir, "nope.yaml")}, ExitUsage, "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout %q does not contain %q", out, tt.stdout)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr %q does not contain %q", errOut, tt.stderr)
			}
		})
	}
}

func TestValidateReadsStdin(t *testing.T) {
	root := NewRootCommand(builtin.NewCatalog())
	var out bytes.Buffer
	root.SetArgs([]string{"validate", "-f", "-"})
	root.SetIn(strings.NewReader("worker_selection:\n  decode: kvcr\n"))
	root.SetOut(&out)
	if err := root.Execute(); err != nil {
		t.Fatalf("validate -f -: %v; output %s", err, out.String())
	}
	if !strings.Contains(out.String(), "1 file(s) valid") {
		t.Errorf("output %q", out.String())
	}
}

// TestCatalog: kvhint catalog lists every linked type, the hints with their
// commitments and default hosts.
func TestCatalog(t *testing.T) {
	code, out, stderr := runCLI("catalog")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"WORKER SELECTION", "dynamo-default-cost-fn ", "kvcr ", "HINT", "COMMITMENTS", "DEFAULT HOSTS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, row := range [][]string{{"kv-fetch", "KVCopy", "kvcr"}, {"kv-retain", "none", "-"}, {"kv-evict", "none", "*"}} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == row[0] && f[1] == row[1] && f[2] == row[2] {
				found = true
			}
		}
		if !found {
			t.Errorf("no row %v in:\n%s", row, out)
		}
	}
}
