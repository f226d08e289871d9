// Package e2e tests the product end to end: the real kvhint binary (manager,
// sidecars) and kvhint-dev (simulated workers, kvhint-dev dev) as separate
// processes against a real
// kube-apiserver and etcd, driven with the real kubectl.
package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/devsuite"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

const namespace = "e2e"

var (
	suite  devsuite.Suite
	env    *devenv.Env
	repo   string // module root, for config/samples
	devBin string // kvhint-dev: sim-worker and dev
)

func TestMain(m *testing.M) {
	// The suite books straight at the sidecars and reads, at each worker,
	// the exact hints it received, so its workers opt in to push
	// (PushHints): nothing carries a booking's answer in-band here.
	// TestDevCommand runs the in-band path, through kvhint-dev dev's front
	// routers.
	os.Exit(devsuite.Run(m, "e2e", devenv.Options{Namespace: namespace, Progress: os.Stderr, PushHints: true},
		func(_ context.Context, s *devsuite.Suite) (err error) {
			suite, env, devBin = *s, s.Env, s.DevBin
			repo, err = testenv.RepoRoot()
			return err
		}))
}

func requireEnv(t *testing.T) {
	t.Helper()
	suite.Require(t)
}
