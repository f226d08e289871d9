// Package tutorial follows the plugin tutorial of docs/plugins.md in a module of its
// own, as a team would, with the policy that broke it: a KV copy sender
// hosted by default under kvcr. It then builds the team's kvhint with the
// repository's Dockerfile, running that file's build steps in a clean copy
// of the build context it names (there is no Docker engine in the test
// environment).
package tutorial

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is this repository's root, from the test's directory.
const repoRoot = "../.."

func TestTutorialModuleAndDockerfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a whole kvhint; not with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	repo, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}

	// The team's checkout sits beside a checkout of kv-hint-operator, and
	// its go.mod replaces the module with it, as one developing against
	// an unreleased version does.
	work := t.TempDir()
	if err := os.Symlink(repo, filepath.Join(work, "kv-hint-operator")); err != nil {
		t.Fatal(err)
	}
	team := filepath.Join(work, "team")
	copyTree(t, "testdata/team", team)
	writeGoMod(t, repo, team)

	// The caller's build flags are kept (make's -trimpath among them), so
	// the team's build finds the packages it shares with this repository's
	// already compiled.
	env := append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local",
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}

	// Step 3: the conformance kit, in the team's own tests.
	run(team, env, goBin, "test", "./...")
	// Step 5, with the replace still in go.mod: vendor, then build the
	// image from the module's directory.
	run(team, env, goBin, "mod", "vendor")

	steps := buildSteps(t, filepath.Join(repo, "Dockerfile"))

	// Without vendor/, the Dockerfile's steps fail where the tutorial once
	// said they work: the replaced checkout is not in the build context.
	bare := filepath.Join(t.TempDir(), "context")
	copyTree(t, team, bare)
	if err := os.RemoveAll(filepath.Join(bare, "vendor")); err != nil {
		t.Fatal(err)
	}
	if err := runSteps(t, steps, bare, goBin); err == nil {
		t.Errorf("the Dockerfile's steps built a module whose replace points outside the build context, without vendor/")
	}

	// With vendor/, they build, from a clean copy of exactly the module's
	// directory, and download nothing (GOPROXY=off).
	ctx := filepath.Join(t.TempDir(), "context")
	copyTree(t, team, ctx)
	img := t.TempDir()
	if err := runStepsIn(t, steps, ctx, img, goBin); err != nil {
		t.Fatal(err)
	}
	kvhint := filepath.Join(img, "out", "kvhint")

	// Step 6: the build knows the type, and a bare kvcr role is valid,
	// running copy-audit as its one KV copy sender.
	out := run(team, os.Environ(), kvhint, "validate", "-f", "hints.yaml", "-o", "json")
	if !strings.Contains(out, `"valid": true`) && !strings.Contains(out, `"valid":true`) {
		t.Errorf("kvhint validate of a bare kvcr role:\n%s", out)
	}
	out = run(team, os.Environ(), kvhint, "compile", "-f", "hints.yaml")
	if !strings.Contains(out, "copy-audit") || strings.Contains(out, "kv-fetch") {
		t.Errorf("kvhint compile of a bare kvcr role runs copy-audit, not kv-fetch:\n%s", out)
	}
}

// writeGoMod writes the team's go.mod and go.sum: the requirements of the
// repository's own example plugin module (the same dependencies), under
// the team's module path, with the replace pointing at the checkout beside
// it.
func writeGoMod(t *testing.T, repo, team string) {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(repo, "examples", "kv-offload", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(mod), "\n") {
		switch {
		case strings.HasPrefix(line, "module "):
			line = "module example.com/copy-audit"
		case strings.HasPrefix(line, "replace github.com/kvrouter/kv-hint-operator"):
			line = "replace github.com/kvrouter/kv-hint-operator => ../kv-hint-operator"
		}
		b.WriteString(line + "\n")
	}
	if err := os.WriteFile(filepath.Join(team, "go.mod"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(repo, "examples", "kv-offload", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(team, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
}

// step is one instruction of the Dockerfile's build stage.
type step struct{ op, arg string }

// buildSteps reads the instructions of the Dockerfile's first stage.
func buildSteps(t *testing.T, path string) []step {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []step
	stages := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, arg, _ := strings.Cut(line, " ")
		op = strings.ToUpper(op)
		if op == "FROM" {
			stages++
			continue
		}
		if stages != 1 {
			continue
		}
		switch op {
		case "WORKDIR", "COPY", "RUN", "ENV":
			steps = append(steps, step{op, strings.TrimSpace(arg)})
		default:
			t.Fatalf("the build stage has an instruction the test cannot run: %s", line)
		}
	}
	if len(steps) == 0 {
		t.Fatal("the Dockerfile has no build stage")
	}
	return steps
}

func runSteps(t *testing.T, steps []step, ctx, goBin string) error {
	return runStepsIn(t, steps, ctx, t.TempDir(), goBin)
}

// runStepsIn runs the build stage's steps in order, the image's file
// system rooted at img: WORKDIR and COPY as Docker does them (COPY from
// the build context ctx), RUN with sh in the working directory, every
// absolute path the commands name moved under img.
func runStepsIn(t *testing.T, steps []step, ctx, img, goBin string) error {
	t.Helper()
	wd := img
	env := append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local", "GOFLAGS=",
		"PATH="+filepath.Dir(goBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, s := range steps {
		switch s.op {
		case "WORKDIR":
			wd = filepath.Join(img, s.arg)
			if err := os.MkdirAll(wd, 0o755); err != nil {
				return err
			}
		case "ENV":
			k, v, _ := strings.Cut(s.arg, "=")
			env = append(env, k+"="+v)
		case "COPY":
			args := strings.Fields(s.arg)
			if len(args) < 2 || strings.HasPrefix(args[0], "--") {
				t.Fatalf("COPY %s: the test copies from the build context only", s.arg)
			}
			dst := args[len(args)-1]
			if !filepath.IsAbs(dst) {
				dst = filepath.Join(wd, dst)
			} else {
				dst = filepath.Join(img, dst)
			}
			for _, src := range args[:len(args)-1] {
				from := filepath.Join(ctx, src)
				st, err := os.Stat(from)
				if err != nil {
					return err
				}
				if st.IsDir() {
					copyTree(t, from, dst)
					continue
				}
				b, err := os.ReadFile(from)
				if err != nil {
					return err
				}
				if err := os.MkdirAll(dst, 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dst, filepath.Base(src)), b, 0o644); err != nil {
					return err
				}
			}
		case "RUN":
			cmdline := strings.ReplaceAll(s.arg, " /out/", " "+filepath.Join(img, "out")+"/")
			cmd := exec.Command("sh", "-c", cmdline)
			cmd.Dir, cmd.Env = wd, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("RUN %s:\n%s", s.arg, out)
				return err
			}
		}
	}
	return nil
}

// copyTree copies the directory src to dst, following no symbolic links.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
