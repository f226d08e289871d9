// Package e2e tests the product end to end: the real kvhint binary (manager,
// sidecars) and kvhint-dev (simulated workers, kvhint-dev dev) as separate
// processes against a real
// kube-apiserver and etcd, driven with the real kubectl.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

const namespace = "e2e"

var (
	env     *devenv.Env
	repo    string // module root, for config/samples
	kvhint  string // the kvhint binary under test
	devBin  string // kvhint-dev: sim-worker and dev
	skipWhy string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets, skip, err := testenv.Assets()
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	case skip != "":
		// go test ./... without make: the unit tests still run.
		skipWhy = skip
		return m.Run()
	}
	if repo, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kvhint-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	bins, err := testenv.Build(dir, "kvhint", "kvhint-dev")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bin := bins[0]
	kvhint, devBin = bins[0], bins[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The suite books straight at the sidecars and reads, at each worker,
	// the exact hints it received, so its workers opt in to push
	// (PushHints): nothing carries a booking's answer in-band here.
	// TestDevCommand runs the in-band path, through kvhint-dev dev's front
	// routers.
	env, err = devenv.Start(ctx, devenv.Options{Bin: bin, WorkerBin: devBin, Assets: assets, Dir: dir, Namespace: namespace, Progress: os.Stderr, PushHints: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the environment: %v\n", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		for _, p := range append([]*devenv.Process{env.Manager}, sidecarProcs()...) {
			fmt.Fprintf(os.Stderr, "\n=== end of %s\n%s\n", p.Log, p.Tail(4096))
		}
	}
	env.Stop()
	return code
}

func sidecarProcs() []*devenv.Process {
	var out []*devenv.Process
	for _, s := range env.Sidecars {
		out = append(out, s.Proc)
	}
	return out
}

func requireEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip(skipWhy)
	}
}
