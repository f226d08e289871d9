package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const previewTrace = `{"timestamp":0,"input_length":1024,"output_length":10,"hash_ids":[1,2],"session_id":"a"}
{"timestamp":10,"input_length":1024,"output_length":10,"hash_ids":[3,4]}
{"timestamp":20,"input_length":1536,"output_length":10,"hash_ids":[1,2,5],"session_id":"a"}
`

// kvhint preview exits 0 with no difference, 1 with one, 2 on an error,
// and reads --base and --head the way compile -f does (manifests and
// --router included).
func TestPreviewExitCodes(t *testing.T) {
	dir := t.TempDir()
	tr := writeFile(t, dir, "trace.jsonl", previewTrace)
	none := writeFile(t, dir, "none.yaml", "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n")
	retain := writeFile(t, dir, "retain.yaml", "worker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: kv-retain\n")
	bad := writeFile(t, dir, "bad.jsonl", previewTrace+`{"timestamp":30,"input_length":10}`+"\n"+`{"timestamp":40,"input_length":-4}`+"\n")
	spaced := writeFile(t, dir, "spaced.jsonl", strings.NewReplacer(`"timestamp":10,`, `"timestamp":1000,`, `"timestamp":20,`, `"timestamp":2000,`).Replace(previewTrace))
	empty := writeFile(t, dir, "empty.jsonl", "")
	sessionless := writeFile(t, dir, "sessionless.jsonl", `{"timestamp":0,"input_length":1024,"output_length":10,"hash_ids":[1,2]}`+"\n"+`{"timestamp":10,"input_length":1536,"output_length":10,"hash_ids":[1,2,5]}`+"\n")
	invalid := writeFile(t, dir, "invalid.yaml", "worker_selection:\n  aggregated:\n    type: no-such-selection\n")

	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"same", []string{"--base", none, "--head", none}, 0, "**Verdict: no difference**", ""},
		{"actions differ, figures do not", []string{"--base", none, "--head", retain}, 3, "| bookings with kv.retain | 0 | 1 | +1 |", "neither the prefix hit ratio nor the TTFT moves"},
		{"improves", []string{"--base", none, "--head", retain, "--trace", spaced, "--workers", "1", "--cache-blocks", "2", "--sensitivity=false"}, 1, "**Verdict: improves.** prefix hit +28.57 pp", ""},
		{"json", []string{"--base", none, "--head", retain, "-o", "json"}, 3, `"differs": true`, ""},
		{"empty trace", []string{"--base", none, "--head", retain, "--trace", empty}, 3, "**Verdict: cannot tell.**", "the trace is empty"},
		{"no session", []string{"--base", none, "--head", retain, "--trace", sessionless}, 3, "0 of 2 rows carry a session id", "0 of 2 rows carry a session id, and kv-retain (role aggregated) acts only within a session"},
		{"bad evict semantics", []string{"--base", none, "--head", none, "--evict-in-use", "sometimes"}, 2, "", `--evict-in-use is "sometimes"; it must be keep`},
		{"engine block not dividing", []string{"--base", none, "--head", none, "--engine-block-size", "48"}, 2, "", "--engine-block-size is 48; it must divide --trace-block-size 512"},
		{"cache under a block", []string{"--base", none, "--head", none, "--cache-tokens", "100"}, 2, "", "--cache-tokens is 100, less than one block of 512 tokens"},
		{"cache twice", []string{"--base", none, "--head", none, "--cache-tokens", "4096", "--cache-blocks", "8"}, 2, "", "--cache-tokens and --cache-blocks"},
		{"bad windows", []string{"--base", none, "--head", none, "--windows", "-1"}, 2, "", "--windows is -1"},
		{"plot", []string{"--base", none, "--head", retain, "--trace", spaced, "--workers", "1", "--cache-blocks", "2", "--sensitivity=false", "--plot", filepath.Join(dir, "w.svg")}, 1, "**Verdict: improves.**", ""},
		{"malformed row", []string{"--base", none, "--head", retain, "--trace", bad}, 2, "", "trace line 5: input_length is -4"},
		{"invalid head", []string{"--base", none, "--head", invalid}, 2, "", "--head " + invalid + " does not compile"},
		{"missing head", []string{"--base", none}, 2, "", "--base and --head are required"},
		{"bad output", []string{"--base", none, "--head", none, "-o", "yaml"}, 2, "", `--output is "yaml"`},
		{"manifests need a router", []string{"--base", "../../config/samples", "--head", "../../config/samples"}, 2, "", "choose one with --router"},
		{"manifests", []string{"--base", "../../config/samples", "--head", "../../config/samples", "--router", "llama"}, 0, "### Role decode", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"preview"}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "--trace") {
				args = append(args, "--trace", tr)
			}
			code, out, errOut := runCLI(args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			if !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
				t.Errorf("stdout %q and stderr %q; want them to contain %q and %q", out, errOut, tc.out, tc.err)
			}
			if tc.name == "plot" {
				if svg, err := os.ReadFile(filepath.Join(dir, "w.svg")); err != nil || !strings.HasPrefix(string(svg), "<svg ") {
					t.Errorf("--plot wrote %q, %v", svg, err)
				}
			}
			if tc.name == "json" {
				var v map[string]any
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Errorf("--output json is not JSON: %v", err)
				}
			}
		})
	}
}

// The recording flags other than --record-trace mean nothing alone, and
// values out of range are refused, naming the flag, before the sidecar
// starts serving: a sample rate out of (0, 1], a rotation count that would
// loop over millions of renames, negative counts and sizes that used to
// take the defaults silently.
func TestSidecarRecordFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "hints.yaml", "worker_selection:\n  aggregated: dynamo-default-cost-fn\n")
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--record-sample-rate", "0.5"}, "--record-sample-rate needs --record-trace PATH"},
		{[]string{"--record-max-files", "2"}, "--record-max-files needs --record-trace PATH"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-sample-rate", "0"}, "--record-sample-rate is 0"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-sample-rate", "1.5"}, "--record-sample-rate is 1.5"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-max-files", "10000000"}, "--record-max-files is 10000000; it must be from 1 to 100"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-max-files", "-1"}, "--record-max-files is -1"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-max-bytes", "-5"}, "--record-max-bytes is -5"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-max-queued-bytes", "-1"}, "--record-max-queued-bytes is -1"},
		{[]string{"--record-trace", filepath.Join(dir, "t.jsonl"), "--record-flush-interval", "-1s"}, "--record-flush-interval is -1s"},
	} {
		args := append([]string{"sidecar", "--config-file", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, tc.args...)
		code, _, errOut := runCLI(args...)
		if code == 0 || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: exit %d, stderr %q; want a failure naming %q", tc.args, code, errOut, tc.err)
		}
	}
}
