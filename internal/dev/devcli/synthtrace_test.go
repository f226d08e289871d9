package devcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSynthTraceOutput: -o writes the file; a write that fails (a full
// device) is an error naming it, not a silent short trace, and the
// device is left alone; a failed chain-sessions leaves no partial file.
func TestSynthTraceOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "trace.jsonl")
	cmd := newSynthTraceCommand()
	cmd.SetArgs([]string{"--rows=50", "-o", out})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil || strings.Count(string(data), "\n") != 50 {
		t.Fatalf("%s: %d lines, %v; want 50", out, strings.Count(string(data), "\n"), err)
	}

	if _, err := os.Stat("/dev/full"); err == nil {
		cmd := newSynthTraceCommand()
		cmd.SetArgs([]string{"--rows=5000", "-o", "/dev/full"})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("synth-trace -o /dev/full: %v; want the write's error", err)
		}
		if _, err := os.Stat("/dev/full"); err != nil {
			t.Fatalf("/dev/full: %v", err)
		}
	}

	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, append(append([]byte{}, data...), "{not json\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	chained := filepath.Join(dir, "chained.jsonl")
	cs := newChainSessionsCommand()
	cs.SetArgs([]string{"--input", bad, "-o", chained})
	cs.SilenceUsage, cs.SilenceErrors = true, true
	if err := cs.Execute(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("chain-sessions of a bad trace: %v; want an error naming %s", err, bad)
	}
	if _, err := os.Stat(chained); !os.IsNotExist(err) {
		t.Errorf("chain-sessions left %s after failing (%v)", chained, err)
	}
}
