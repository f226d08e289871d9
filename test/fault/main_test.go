// Package fault drives the real kvhint binary with the faults of the
// hardening issue and checks the figures, not only survival: file
// descriptors (/proc/PID/fd), goroutines (go_goroutines on /metrics) and
// RSS (/proc/PID/status) stay under stated bounds, bookings keep their
// latency, and every hint is counted as sent, dropped or failed by reason.
// The sidecar faults need nothing but the binary; the control-plane faults
// (an API server outage, a leader handover) need KUBEBUILDER_ASSETS and
// skip without it. Every test is bounded in time; `make test` runs them.
//
// The soak (TestSoak) runs only with KVHINT_SOAK set: `make soak`.
//
// All traffic stays on loopback.
package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var (
	kvhint string // the binary under test
	devBin string // kvhint-dev, whose sim-worker runs the environment's workers
	tmpDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if tmpDir, err = os.MkdirTemp("", "kvhint-fault-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	repo, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kvhint, devBin = filepath.Join(tmpDir, "kvhint"), filepath.Join(tmpDir, "kvhint-dev")
	build := exec.Command("go", "build", "-o", tmpDir+"/", "./cmd/kvhint", "./cmd/kvhint-dev")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kvhint: %v\n%s", err, out)
		return 1
	}
	defer stopEnv()
	return m.Run()
}
