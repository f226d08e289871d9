package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestRouterDeploymentManifests checks that the example router Deployment
// (labelled for injection in config/router, with the native kvhint
// sidecar written in by hand in config/router-manual), the sidecar's RBAC
// and the router pods' NetworkPolicy are accepted by the API server as
// written (server-side dry run: schema, defaults, admission).
func TestRouterDeploymentManifests(t *testing.T) {
	requireEnv(t)
	for _, dir := range []string{"config/router", "config/router-manual"} {
		out := kubectl(t, "", "apply", "--dry-run=server", "-k", filepath.Join(repo, dir))
		for _, want := range []string{
			"serviceaccount/kvhint-sidecar-llama created (server dry run)",
			"role.rbac.authorization.k8s.io/kvhint-sidecar-llama created (server dry run)",
			"rolebinding.rbac.authorization.k8s.io/kvhint-sidecar-llama created (server dry run)",
			"deployment.apps/llama-router created (server dry run)",
			"networkpolicy.networking.k8s.io/llama-router created (server dry run)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: kubectl output lacks %q:\n%s", dir, want, out)
			}
		}
	}
}

// TestRouterDeploymentUnixSocketManifests: config/router-manual with its
// Unix-socket patch enabled, as its kustomization.yaml says to, is
// accepted as written too, and does what the patch says: the sidecar
// listens on the socket in an emptyDir the router mounts as well.
func TestRouterDeploymentUnixSocketManifests(t *testing.T) {
	requireEnv(t)
	root := t.TempDir()
	dir := filepath.Join(root, "router-manual")
	// config/router-manual builds on ../router: copy both, side by side.
	for _, d := range []string{"router", "router-manual"} {
		src := filepath.Join(repo, "config", d)
		ents, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if d == "router-manual" && e.Name() == "kustomization.yaml" {
				enabled := strings.Replace(string(data), "# - path: unix-socket-patch.yaml\n", "- path: unix-socket-patch.yaml\n", 1)
				if enabled == string(data) {
					t.Fatal("config/router-manual/kustomization.yaml has no commented unix-socket-patch.yaml entry to enable")
				}
				data = []byte(enabled)
			}
			if err := os.WriteFile(filepath.Join(root, d, e.Name()), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := kubectl(t, "", "apply", "--dry-run=server", "-k", dir)
	if want := "deployment.apps/llama-router created (server dry run)"; !strings.Contains(out, want) {
		t.Errorf("kubectl output lacks %q:\n%s", want, out)
	}
	var dep appsv1.Deployment
	if err := yaml.Unmarshal([]byte(kubectl(t, "", "apply", "--dry-run=server", "-k", dir, "-o", "jsonpath={.items[?(@.kind==\"Deployment\")]}")), &dep); err != nil {
		t.Fatal(err)
	}
	spec := dep.Spec.Template.Spec
	mounts := func(cs []corev1.Container, name string) []corev1.VolumeMount {
		for _, c := range cs {
			if c.Name == name {
				return c.VolumeMounts
			}
		}
		t.Fatalf("no container %s", name)
		return nil
	}
	hasSocketDir := func(ms []corev1.VolumeMount) bool {
		for _, m := range ms {
			if m.Name == "kvhint-socket" && m.MountPath == "/run/kvhint" {
				return true
			}
		}
		return false
	}
	if !hasSocketDir(mounts(spec.InitContainers, "kvhint")) || !hasSocketDir(mounts(spec.Containers, "router")) {
		t.Errorf("the sidecar and the router do not both mount kvhint-socket at /run/kvhint: %+v", spec)
	}
	var args []string
	for _, c := range spec.InitContainers {
		if c.Name == "kvhint" {
			args = c.Args
		}
	}
	if !slices.Contains(args, "--listen=unix:///run/kvhint/booking.sock") {
		t.Errorf("sidecar args %q", args)
	}
	ok := false
	for _, v := range spec.Volumes {
		ok = ok || (v.Name == "kvhint-socket" && v.EmptyDir != nil)
	}
	if !ok || spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil {
		t.Errorf("no kvhint-socket emptyDir, or no fsGroup: %+v", spec)
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
