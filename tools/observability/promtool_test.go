package observability_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kvrouter/kv-hint-operator/tools/observability"
)

// promtool builds bin/promtool from this module's pinned Prometheus (Go's
// build cache makes a second build quick) and returns its path. The
// remove_all_sd tag, Prometheus' own, leaves out the service discoveries
// (the cloud providers' SDKs, most of a cold build), which checking and
// unit-testing rules never use.
func promtool(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("bin", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	cmd := exec.Command("go", "build", "-tags", "remove_all_sd", "-o", bin, "github.com/prometheus/prometheus/cmd/promtool")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building promtool: %v\n%s", err, out)
	}
	return bin
}

// TestPromtool: promtool checks the rules file and runs the unit tests in
// tests/, which hold synthetic series for every alert.
func TestPromtool(t *testing.T) {
	bin := promtool(t)
	if out, err := exec.Command(bin, "check", "rules", filepath.Join(root, observability.RulesPath)).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	tests, err := filepath.Glob(filepath.Join("tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests in tests/ (%v)", err)
	}
	out, err := exec.Command(bin, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
