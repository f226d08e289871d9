package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/testing/proctest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestSidecarAndSimWorkerProcesses runs the real binaries: `kvhint sidecar`
// on a config file and `kvhint-dev sim-worker --register` as two processes, a
// booking over loopback HTTP, the hint read back from the worker, and a
// clean exit on SIGTERM.
func TestSidecarAndSimWorkerProcesses(t *testing.T) {
	bin, devBin, config := buildForProcessTest(t)

	// The simulated worker runs on loopback: development.
	sidecar := exec.Command(bin, "sidecar", "--config-file", config, "--allow-loopback-hint-endpoints", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	stderr, err := sidecar.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sidecar.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() { _ = sidecar.Process.Kill() })
	// The sidecar logs JSON lines; the first says where it listens.
	logs := bufio.NewScanner(stderr)
	var bookings string
	for bookings == "" && logs.Scan() {
		var line struct{ Msg, Bookings string }
		if json.Unmarshal(logs.Bytes(), &line) == nil && line.Msg == "Sidecar started" {
			bookings = "http://" + line.Bookings
		}
	}
	if bookings == "" {
		t.Fatalf("the sidecar never said where it listens: %v", logs.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr); exited <- sidecar.Wait() }()

	worker := exec.Command(devBin, "sim-worker", "--id", "decode-0", "--register", bookings, "--print-endpoint")
	stdout, err := worker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("sim-worker printed no endpoint: %v", err)
	}
	workerURL := strings.TrimSuffix(strings.TrimSpace(line), "/v1/hints")

	body := `{"request_id":"proc-1","role":"decode","worker":"decode-0","prompt_tokens":128,"block_size":16,` +
		`"session":{"id":"s","turn":4,"final":true},` +
		`"committed_kv_copy":{"source_worker":"decode-1","source_endpoint":"tcp://10.0.0.8:23280","block_hashes":[18446744073709551615,42]}}`
	resp, err := http.Post(bookings+"/v1/bookings", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{"protocol_version":"0.1","message_id":"proc-1","actions":[` +
		`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[18446744073709551615,42],"source_control_endpoint":"tcp://10.0.0.8:23280"}},` +
		`{"action_id":"a2","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true}}]}`
	if resp.StatusCode != http.StatusOK || string(got) != want {
		t.Fatalf("booking answer %d %s, want 200 %s", resp.StatusCode, got, want)
	}

	// The worker process has it, byte for byte.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get(workerURL + "/hints")
		if err != nil {
			t.Fatal(err)
		}
		var recorded struct {
			Hints []struct {
				Body json.RawMessage `json:"body"`
			} `json:"hints"`
		}
		err = json.NewDecoder(r.Body).Decode(&recorded)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(recorded.Hints) == 1 {
			if string(recorded.Hints[0].Body) != want {
				t.Fatalf("the worker recorded %s, want %s", recorded.Hints[0].Body, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker recorded %d hints after 10s, want 1", len(recorded.Hints))
		}
		time.Sleep(20 * time.Millisecond)
	}

	proctest.StopBySIGTERM(t, sidecar, exited)
}

// TestSidecarOnUnixSocket runs the real binary with --listen unix:///PATH
// and --listen-mode: the socket has that mode, kvhint-dev loadgen books over
// it, and SIGTERM removes it.
func TestSidecarOnUnixSocket(t *testing.T) {
	bin, devBin, config := buildForProcessTest(t)
	sockDir, err := os.MkdirTemp("", "kvs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "booking.sock")

	sidecar := exec.Command(bin, "sidecar", "--config-file", config, "--listen", "unix://"+sock, "--listen-mode", "0640", "--metrics-listen", "127.0.0.1:0")
	stderr, err := sidecar.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sidecar.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sidecar.Process.Kill() })
	logs := bufio.NewScanner(stderr)
	var bookings string
	for bookings == "" && logs.Scan() {
		var line struct{ Msg, Bookings string }
		if json.Unmarshal(logs.Bytes(), &line) == nil && line.Msg == "Sidecar started" {
			bookings = line.Bookings
		}
	}
	if bookings != "unix://"+sock {
		t.Fatalf("the sidecar says it listens on %q, want unix://%s (%v)", bookings, sock, logs.Err())
	}
	exited := make(chan error, 1)
	go func() { _, _ = io.Copy(io.Discard, stderr); exited <- sidecar.Wait() }()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o640 {
		t.Fatalf("%s: %v %v, want a socket with mode 0640", sock, fi, err)
	}

	// The config loads in the background; the generator's bookings get
	// 503 until it has. Workers are unknown: every answer is 204.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(devBin, "loadgen", "--target", "unix://"+sock, "--rate", "200", "--duration", "250ms",
			"--connections", "2", "--role", "decode=d0").CombinedOutput()
		if err == nil && strings.Contains(string(out), "completed 50 ") && strings.Contains(string(out), " 0 errors") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kvhint-dev loadgen over the socket: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	proctest.StopBySIGTERM(t, sidecar, exited)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after SIGTERM: %v", err)
	}
}

// buildForProcessTest builds the product binary (kvhint) and the
// development one (kvhint-dev, for sim-worker and loadgen) into a temporary
// folder and writes a hints config of one decode role beside them; it skips
// in -short.
func buildForProcessTest(t *testing.T) (bin, devBin, config string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the kvhint and kvhint-dev binaries")
	}
	dir := t.TempDir()
	bins, err := testenv.Build(dir, "kvhint", "kvhint-dev")
	if err != nil {
		t.Fatal(err)
	}
	config = filepath.Join(dir, "hints.yaml")
	if err := os.WriteFile(config, []byte("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}, {type: kv-evict}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bins[0], bins[1], config
}
