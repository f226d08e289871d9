package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRouterDeploymentManifests checks that the example router Deployment
// with its native kvhint sidecar, and the sidecar's RBAC, are accepted by the
// API server as written (server-side dry run: schema, defaults, admission).
func TestRouterDeploymentManifests(t *testing.T) {
	requireEnv(t)
	out := kubectl(t, "", "apply", "--dry-run=server", "-k", filepath.Join(repo, "config/router"))
	for _, want := range []string{
		"serviceaccount/kvhint-sidecar-llama created (server dry run)",
		"role.rbac.authorization.k8s.io/kvhint-sidecar-llama created (server dry run)",
		"rolebinding.rbac.authorization.k8s.io/kvhint-sidecar-llama created (server dry run)",
		"deployment.apps/llama-router created (server dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, out)
		}
	}
}
