package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
)

// TestCompileTargetDynamoSamples: compiled for a Dynamo Frontend, every
// manifest of config/samples either gives files a released Frontend reads
// (the independent model of its parser, dynamopolicy.CheckReleased, and
// the Frontend's start-up checks for the build: stock, or the one a
// declared catalog describes) or is refused whole, with
// PolicyFormCannotCarry or, on a stock build, for a type the build does
// not link; never with a file dropped. Against the built-in catalog
// declared (--catalog), a build that links kvhint's types, only the form
// can refuse.
func TestCompileTargetDynamoSamples(t *testing.T) {
	inputs, err := filepath.Glob(samples + "/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inputs = append(inputs, samples+"/dynamo-router", samples+"/dynamo-graph")
	builtinCatalog := filepath.Join(samples, "..", "catalogs", "builtin.yaml")
	for _, build := range []struct {
		name string
		args []string
		// refusals are the reasons a router may be refused for.
		refusals []string
		// wantWritten is the fewest files written.
		wantWritten int
	}{{
		name:        "stock build",
		refusals:    []string{"PolicyFormCannotCarry", "UnknownHintType", "UnknownWorkerSelection"},
		wantWritten: 3, // the restart-mode samples (declared catalogs) and non-kv.yaml
	}, {
		name:        "declared build",
		args:        []string{"--catalog", builtinCatalog},
		refusals:    []string{"PolicyFormCannotCarry"},
		wantWritten: 3, // the form refuses the sidecar samples
	}} {
		written := 0
		for _, in := range inputs {
			if filepath.Base(in) == "kustomization.yaml" {
				continue
			}
			t.Run(build.name+"/"+filepath.Base(in), func(t *testing.T) {
				code, stdout, stderr := runCLI(append([]string{"compile", "--target", "dynamo", "-f", in}, build.args...)...)
				switch code {
				case ExitOK:
					for _, doc := range strings.Split(stdout, "\n---\n") {
						if strings.TrimSpace(doc) == "" {
							continue
						}
						written++
						if err := dynamopolicy.CheckReleased([]byte(doc)); err != nil {
							t.Errorf("a released Frontend refuses the file: %v\n%s", err, doc)
						}
					}
				case ExitInvalid:
					if stdout != "" {
						t.Errorf("a refused router printed a file:\n%s", stdout)
					}
					for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
						if strings.Contains(line, " (warning): ") {
							continue
						}
						ok := false
						for _, r := range build.refusals {
							ok = ok || strings.Contains(line, ": "+r+": ")
						}
						if !ok {
							t.Errorf("refused for another reason than %v: %s", build.refusals, line)
						}
					}
				default:
					t.Fatalf("exit %d: %s", code, stderr)
				}
			})
		}
		if written < build.wantWritten {
			t.Errorf("%s: %d files written for Dynamo; want at least %d", build.name, written, build.wantWritten)
		}
	}
}

// TestTargetFlags: --target picks the form of a hints YAML file, and a
// --policy-file-form that contradicts it is refused with a message that
// says why and what to do.
func TestTargetFlags(t *testing.T) {
	dir := t.TempDir()
	perRole := filepath.Join(dir, "per-role.yaml")
	released := filepath.Join(dir, "released.yaml")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(perRole, "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n")
	write(released, "worker_selection:\n  decode: default\n")
	// Dynamo's parse rules, which the sidecar target does not apply: an
	// integer key refuses 1.0, and a stock build links no kv_hint_policy.
	floatSeed := filepath.Join(dir, "float-seed.yaml")
	write(floatSeed, "worker_selection:\n  decode: d\n  instances:\n  - {name: d, type: dynamo-default-cost-fn, parameters: {seed: 1.0}}\n")
	hinted := filepath.Join(dir, "hinted.yaml")
	write(hinted, "worker_selection:\n  decode: default\nkv_hint_policy: {type: kv-retain}\n")
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"sidecar reads the per-role form", []string{"compile", "--target", "sidecar", "-f", perRole}, ExitOK, "type: dynamo-default-cost-fn", ""},
		{"dynamo refuses the per-role form", []string{"validate", "--target", "dynamo", "-f", perRole}, ExitInvalid, "RouterWideHint", ""},
		{"dynamo reads the released form", []string{"compile", "--target", "dynamo", "-f", released}, ExitOK, "decode: default", ""},
		{"dynamo with the per-role form knob contradicts", []string{"compile", "--target", "dynamo", "--policy-file-form", "PerRoleHints", "-f", released}, ExitUsage, "",
			"--target dynamo with --policy-file-form PerRoleHints: a released Dynamo Frontend reads only the RouterWideHint form"},
		{"dynamo with the released form knob agrees", []string{"validate", "--target", "dynamo", "--policy-file-form", "RouterWideHint", "-f", released}, ExitOK, "1 file(s) valid", ""},
		{"sidecar with either knob", []string{"validate", "--target", "sidecar", "--policy-file-form", "RouterWideHint", "-f", released}, ExitOK, "1 file(s) valid", ""},
		{"dynamo applies serde's integer rule", []string{"validate", "--target", "dynamo", "-f", floatSeed}, ExitInvalid, "invalid type: floating point `1`, expected u64", ""},
		{"the sidecar target keeps its own reading", []string{"validate", "--target", "sidecar", "-f", floatSeed}, ExitOK, "1 file(s) valid", ""},
		{"dynamo refuses a hint policy a stock build does not link", []string{"validate", "--target", "dynamo", "-f", hinted}, ExitInvalid, "not linked into a stock Dynamo build", ""},
		{"an unknown target", []string{"compile", "--target", "frontend", "-f", released}, ExitUsage, "", `"frontend" is not a target; use sidecar or dynamo`},
		{"dynamo over manifests of a sidecar router", []string{"compile", "--target", "dynamo", "-f", samples + "/non-kv.yaml"}, ExitOK, "aggregated: default", ""},
		{"a sidecar router's own target", []string{"compile", "-f", samples + "/non-kv.yaml"}, ExitOK, "type: dynamo-round-robin", ""},
		{"a restart-mode router's own target", []string{"compile", "-f", samples + "/dynamo-graph"}, ExitOK, "decode: decode", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant stdout with %q, stderr with %q", code, tc.code, stdout, stderr, tc.stdout, tc.stderr)
			}
		})
	}
}
