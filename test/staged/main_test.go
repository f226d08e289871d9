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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/devsuite"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

const namespace = "staged"

var (
	suite devsuite.Suite
	env   *devenv.Env
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The manager is a team's kvhint build with the kv-offload plugin
	// (examples/kv-offload), the router pods' sidecars the stock one: a
	// manager upgraded before the router pods. A role that lists
	// kv-offload passes the manager's checks and is refused by every
	// sidecar.
	dir, err := os.MkdirTemp("", "kvhint-staged-manager-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	manager, err := buildOffloadManager(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "staged:", err)
		return 1
	}
	// Two router pods of each router: a rollout is judged over every pod,
	// and none may stay on a candidate rolled back.
	return devsuite.Run(m, "staged", devenv.Options{Namespace: namespace, Progress: os.Stderr, RouterPods: 2, ManagerBin: manager},
		func(ctx context.Context, s *devsuite.Suite) error {
			suite, env = *s, s.Env
			if env == nil {
				return nil
			}
			_, err := env.ApplySamples(ctx)
			return err
		})
}

// buildOffloadManager builds examples/kv-offload's kvhint into dir.
func buildOffloadManager(dir string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "kvhint-offload")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/kvhint")
	cmd.Dir = filepath.Join(root, "examples", "kv-offload")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building examples/kv-offload's kvhint: %v\n%s", err, b)
	}
	return out, nil
}

func requireEnv(t *testing.T) {
	t.Helper()
	suite.Require(t)
}
