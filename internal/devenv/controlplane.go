// Package devenv runs kv-hint-operator on one machine: a local control plane
// (kube-apiserver and etcd on loopback), and kvhint's own processes
// (manager, sidecar; simulated workers from kvhint-dev) as real child
// processes. `kvhint-dev dev` and the end-to-end tests are built on it.
package devenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvrouter/kv-hint-operator/config/crd"
)

// ControlPlane is a kube-apiserver and etcd on loopback with the CRDs installed.
type ControlPlane struct {
	env *envtest.Environment
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Kubeconfig is a file for kubectl and child processes.
	Kubeconfig string
}

// StartControlPlane starts kube-apiserver and etcd from the assets folder
// and installs the CRDs. The kubeconfig is written into dir.
func StartControlPlane(assets, dir string) (*ControlPlane, error) {
	crds, err := crd.CRDs()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded CRDs: %w", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDs:                     crds,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	cp := &ControlPlane{env: env, Config: cfg, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	if err := os.WriteFile(cp.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return cp, nil
}

// AdmitAsClusters makes env's kube-apiserver admit pods as a cluster's
// does: with the ServiceAccount admission plugin, which envtest turns off
// and every cluster runs. The plugin refuses a pod whose ServiceAccount
// does not exist, and adds a kube-api-access-* token volume, mounted in
// every container, to a pod whose ServiceAccount automounts one (the
// default), so a mutation that meets pods only without it is not tested
// as it runs. envtest already sets the service account issuer and keys
// the plugin's tokens need. Call it before env.Start; the caller creates
// the ServiceAccounts its pods use, or runs kube-controller-manager's
// serviceaccount controller, which creates "default" in every namespace.
func AdmitAsClusters(env *envtest.Environment) {
	env.ControlPlane.GetAPIServer().Configure().
		Disable("disable-admission-plugins").
		Set("enable-admission-plugins", "ServiceAccount")
}

// Stop stops the API server and etcd and removes their data.
func (cp *ControlPlane) Stop() error { return cp.env.Stop() }

// FindAssets returns the folder holding kube-apiserver and etcd: the given
// one, else $KUBEBUILDER_ASSETS, else what hack/envtest-assets.sh (searched
// upwards from the working directory) builds or finds in its cache. The
// script's progress goes to progress, since a first build takes minutes.
func FindAssets(given string, progress *os.File) (string, error) {
	for _, dir := range []string{given, os.Getenv("KUBEBUILDER_ASSETS")} {
		if dir != "" {
			if err := checkAssets(dir); err != nil {
				return "", err
			}
			return dir, nil
		}
	}
	script, err := findUp("hack/envtest-assets.sh")
	if err != nil {
		return "", fmt.Errorf("no kube-apiserver and etcd: pass --assets DIR, set KUBEBUILDER_ASSETS, or run from the kv-hint-operator checkout so hack/envtest-assets.sh can build them")
	}
	cmd := exec.Command("bash", script)
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	dir := strings.TrimSpace(string(out))
	return dir, checkAssets(dir)
}

func checkAssets(dir string) error {
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return fmt.Errorf("assets folder %s: %w", dir, err)
		}
	}
	return nil
}

func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
