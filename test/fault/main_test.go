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
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
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
	bins, err := testenv.Build(tmpDir, "kvhint", "kvhint-dev")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	kvhint, devBin = bins[0], bins[1]
	defer stopEnv()
	return m.Run()
}
