package devcli

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/proctest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// runCLI runs kvhint-dev in-process and returns its exit code and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb strings.Builder
	code = run(builtin.NewCatalog(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// buildDev builds kvhint-dev into a temporary folder; it skips in -short.
func buildDev(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the kvhint-dev binary")
	}
	bins, err := testenv.Build(t.TempDir(), "kvhint-dev")
	if err != nil {
		t.Fatal(err)
	}
	return bins[0]
}

// TestSimWorkerSeveralSinks runs the real binary as two sink workers in one
// process, as the load scripts do: each listens where it was told, counts
// its own hints and answers with its own ID.
func TestSimWorkerSeveralSinks(t *testing.T) {
	bin := buildDev(t)
	worker := exec.Command(bin, "sim-worker", "--sink", "--id", "p0", "--listen", "127.0.0.1:0", "--id", "p1", "--listen", "127.0.0.1:0")
	stdout, err := worker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill() }) // waited for below, once it is told to stop
	out := bufio.NewReader(stdout)
	base := map[string]string{}
	for range 2 {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("sim-worker printed %d of 2 workers: %v", len(base), err)
		}
		// "sim-worker ID listening as a sink (...): hint endpoint URL, counts at URL/hints"
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("unexpected line %q", line)
		}
		_, counts, ok := strings.Cut(line, "counts at ")
		if !ok {
			t.Fatalf("no counts URL in %q", line)
		}
		base[f[1]] = strings.TrimSuffix(strings.TrimSpace(counts), "/hints")
	}
	if len(base) != 2 || base["p0"] == "" || base["p1"] == "" || base["p0"] == base["p1"] {
		t.Fatalf("workers listening at %v, want p0 and p1 apart", base)
	}
	post := func(id string) {
		resp, err := http.Post(base[id]+"/v1/hints", "application/json", strings.NewReader(`{"protocol_version":"0.1","message_id":"m","actions":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("hint to %s: %s", id, resp.Status)
		}
	}
	post("p0")
	post("p1")
	post("p1")
	for id, want := range map[string]int{"p0": 1, "p1": 2} {
		resp, err := http.Get(base[id] + "/hints")
		if err != nil {
			t.Fatal(err)
		}
		var counts struct {
			Worker   string `json:"worker"`
			Accepted int    `json:"accepted"`
			Sink     bool   `json:"sink"`
		}
		err = json.NewDecoder(resp.Body).Decode(&counts)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if counts.Worker != id || counts.Accepted != want || !counts.Sink {
			t.Errorf("%s reports %+v, want worker %s, %d accepted, sink", id, counts, id, want)
		}
	}
	exited := make(chan error, 1)
	go func() { _, _ = io.Copy(io.Discard, out); exited <- worker.Wait() }()
	proctest.StopBySIGTERM(t, worker, exited)
}

// TestSimWorkerSeveralWorkersUsage: several workers in one process are for
// sinks only, given in --id/--listen pairs, and never registered.
func TestSimWorkerSeveralWorkersUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--id", "a", "--id", "b"}, "only a --sink runs several workers"},
		{[]string{"--sink", "--id", "a", "--id", "b", "--listen", "127.0.0.1:0"}, "2 --id but 1 --listen"},
		{[]string{"--sink", "--id", "a", "--listen", "127.0.0.1:0", "--id", "b", "--listen", "127.0.0.1:0", "--register", "http://127.0.0.1:1"}, "take one worker"},
	} {
		code, _, stderr := runCLI(append([]string{"sim-worker"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("sim-worker %v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
