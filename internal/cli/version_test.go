package cli

import (
	"runtime"
	"testing"
)

// TestVersion: the stamped values win over the toolchain's, and every
// line is printed.
func TestVersion(t *testing.T) {
	version, commit, date = "v9.8.7", "0123abc", "2026-01-02T03:04:05Z"
	t.Cleanup(func() { version, commit, date = "", "", "" })
	code, out, errs := runCLI("version")
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	want := "kvhint v9.8.7\ncommit: 0123abc\ndate: 2026-01-02T03:04:05Z\ngo: " + runtime.Version() +
		"\nplatform: " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if out != want {
		t.Errorf("kvhint version:\n%s\nwant:\n%s", out, want)
	}
	version, commit, date = "", "", ""
	if b := Build(); b.Version == "" || b.Commit == "" || b.Date == "" {
		t.Errorf("unstamped build info has empty fields: %+v", b)
	}
	if code, _, _ := runCLI("version", "extra"); code != ExitUsage {
		t.Errorf("kvhint version extra: exit %d, want %d", code, ExitUsage)
	}
}
