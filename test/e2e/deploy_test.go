package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRouterDeploymentManifests checks that the example router Deployment
// with its native kvhint sidecar, the sidecar's RBAC and the router pods'
// NetworkPolicy are accepted by the API server as written (server-side dry
// run: schema, defaults, admission).
func TestRouterDeploymentManifests(t *testing.T) {
	requireEnv(t)
	out := kubectl(t, "", "apply", "--dry-run=server", "-k", filepath.Join(repo, "config/router"))
	for _, want := range []string{
		"serviceaccount/kvhint-sidecar-llama created (server dry run)",
		"role.rbac.authorization.k8s.io/kvhint-sidecar-llama created (server dry run)",
		"rolebinding.rbac.authorization.k8s.io/kvhint-sidecar-llama created (server dry run)",
		"deployment.apps/llama-router created (server dry run)",
		"networkpolicy.networking.k8s.io/llama-router created (server dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, out)
		}
	}
}

// TestNetworkPolicyManifests (issue item 11) has the API server check the
// manager's NetworkPolicy. The control plane here runs no CNI, so this
// checks the manifests only: that the policies are enforced as their
// comments say is not tested.
func TestNetworkPolicyManifests(t *testing.T) {
	requireEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvhint-system"}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	out := kubectl(t, "", "apply", "--dry-run=server", "--namespace=kvhint-system", "-k", filepath.Join(repo, "config/networkpolicy"))
	if want := "networkpolicy.networking.k8s.io/kvhint-manager created (server dry run)"; !strings.Contains(out, want) {
		t.Errorf("kubectl output lacks %q:\n%s", want, out)
	}
}
