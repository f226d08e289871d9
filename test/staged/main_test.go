// Package staged tests a staged rollout end to end: the real kvhint
// binary (the manager and two router pods' sidecars), kvhint-dev's
// simulated workers, whose prefix caches are real simulated caches, and
// the dev front routers, which book every request through their pod's
// sidecar, carry the hint to the worker and report what became of it. A
// RouterRollout stages each change of router llama's config: shadow, then
// canary steps judged on the outcomes the sidecars hold, then promotion or
// rollback. Each test plants an effect and says the figure that judged it.
package staged

import (
	"context"
	"os"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/devsuite"
)

const namespace = "staged"

var (
	suite devsuite.Suite
	env   *devenv.Env
)

func TestMain(m *testing.M) {
	// Two router pods of each router: a rollout is judged over every pod,
	// and none may stay on a candidate rolled back.
	os.Exit(devsuite.Run(m, "staged", devenv.Options{Namespace: namespace, Progress: os.Stderr, RouterPods: 2},
		func(ctx context.Context, s *devsuite.Suite) error {
			suite, env = *s, s.Env
			if env == nil {
				return nil
			}
			_, err := env.ApplySamples(ctx)
			return err
		}))
}

func requireEnv(t *testing.T) {
	t.Helper()
	suite.Require(t)
}
