package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// The recorder's flags refuse what they cannot mean, naming the flag,
// before the sidecar starts: a rotation count that would loop over
// millions of renames, negative counts and sizes that used to take the
// defaults silently.
func TestRecordFlagsRefused(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "t.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--record-max-files", "10000000"}, "--record-max-files"},
		{[]string{"--record-max-files", "-1"}, "--record-max-files"},
		{[]string{"--record-max-bytes", "-5"}, "--record-max-bytes"},
		{[]string{"--record-max-queued-bytes", "-1"}, "--record-max-queued-bytes"},
		{[]string{"--record-flush-interval", "-1s"}, "--record-flush-interval"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"sidecar", "--config-file", "/nonexistent/hints.yaml", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
				"--record-trace", trace}, tc.args...)
			code, _, stderr := runCLI(args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want an error naming %s", code, stderr, tc.want)
			}
		})
	}
}
