// Package controlplane starts a Kubernetes control plane on loopback from
// the binaries hack/envtest-assets.sh builds: kube-apiserver and etcd
// (through controller-runtime's envtest), and, when asked,
// kube-controller-manager and kwok with one fake node. It is the one place
// that starts them: `kvhint-dev dev` (internal/dev/devenv) and every envtest
// suite (internal/testing/testenv) go through Start. It imports the
// product's CRDs and nothing else of the product.
package controlplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvrouter/kv-hint-operator/config/crd"
)

// FakeNode is the node kwok plays (Options.Kwok). No scheduler runs: pod
// templates name it in spec.nodeName.
const FakeNode = "kwok-node-0"

// KubeControllerManagerControllers are the controllers
// Options.KubeControllerManager runs: the ones a Deployment rollout needs
// (deployment, replicaset), the garbage collector, which removes the pods
// of the ReplicaSets the deployment controller prunes, and the
// serviceaccount controller, which creates the "default" ServiceAccount
// the ServiceAccount admission plugin wants in every namespace.
const KubeControllerManagerControllers = "deployment,replicaset,garbagecollector,serviceaccount"

// Options shape a control plane. The zero value is kube-apiserver and etcd
// alone, nothing installed, pods admitted as envtest admits them.
type Options struct {
	// Assets holds kube-apiserver and etcd, and kube-controller-manager,
	// kwok (with kwok-stages.yaml) and kubectl when they are used.
	Assets string
	// Dir receives the kubeconfig and the logs of the processes Start
	// runs beside the API server. It must exist.
	Dir string
	// ProductCRDs installs the CRDs of config/crd.
	ProductCRDs bool
	// CRDPaths are more CRD files or folders to install at start.
	CRDPaths []string
	// CRDs are more CRDs to install at start.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// AdmitAsClusters admits pods as a cluster's API server does: with
	// the ServiceAccount admission plugin, which envtest turns off and
	// every cluster runs. The plugin refuses a pod whose ServiceAccount
	// does not exist, and adds a kube-api-access-* token volume, mounted
	// in every container, to a pod whose ServiceAccount automounts one
	// (the default), so a mutation that meets pods only without it is
	// not tested as it runs. envtest already sets the service account
	// issuer and keys the plugin's tokens need. The caller creates the
	// ServiceAccounts its pods use, or runs KubeControllerManager, whose
	// serviceaccount controller creates "default" in every namespace.
	AdmitAsClusters bool
	// KubeControllerManager runs kube-controller-manager with
	// KubeControllerManagerControllers, so that Deployments roll out.
	KubeControllerManager bool
	// Kwok runs kwok, which plays the kubelet of FakeNode (created by
	// Start): the pods on it become Running and Ready.
	Kwok bool
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	env *envtest.Environment
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Kubeconfig is a file for kubectl and child processes, in Dir.
	Kubeconfig string
	// Assets is Options.Assets.
	Assets string
	stops  []func()
}

// Start starts a control plane as o says. On an error nothing it started
// is left running.
func Start(o Options) (cp *ControlPlane, err error) {
	if err := Check(o.Assets); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    o.Assets,
		CRDDirectoryPaths:        o.CRDPaths,
		CRDs:                     o.CRDs,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if o.ProductCRDs {
		product, err := crd.CRDs()
		if err != nil {
			return nil, fmt.Errorf("reading the embedded CRDs: %w", err)
		}
		env.CRDs = append(product, o.CRDs...)
	}
	if o.AdmitAsClusters {
		env.ControlPlane.GetAPIServer().Configure().
			Disable("disable-admission-plugins").
			Set("enable-admission-plugins", "ServiceAccount")
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", o.Assets, err)
	}
	cp = &ControlPlane{env: env, Config: cfg, Kubeconfig: filepath.Join(o.Dir, "kubeconfig"), Assets: o.Assets}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	if err := os.WriteFile(cp.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		return nil, err
	}
	if o.KubeControllerManager {
		if err := cp.startProcess(o.Dir, "kube-controller-manager",
			"--kubeconfig="+cp.Kubeconfig,
			"--controllers="+KubeControllerManagerControllers,
			"--leader-elect=false",
			"--secure-port=0", // serving off: nothing scrapes it
			"--concurrent-deployment-syncs=5",
			"--concurrent-replicaset-syncs=5",
		); err != nil {
			return nil, err
		}
	}
	if o.Kwok {
		// kwok's own fast stages: hack/envtest-assets.sh ships them as
		// kwok-stages.yaml.
		if err := cp.startProcess(o.Dir, "kwok",
			"--kubeconfig="+cp.Kubeconfig,
			"--config="+filepath.Join(o.Assets, "kwok-stages.yaml"),
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--node-port=0",
			"--cidr=10.0.0.1/16",
			"--node-ip=10.0.0.1",
		); err != nil {
			return nil, err
		}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        FakeNode,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"type": "kwok"},
		}}
		if _, err := kc.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating the fake node: %w", err)
		}
	}
	return cp, nil
}

// InstallCRDs installs the CRD files or folders at paths, and waits until
// they are served.
func (cp *ControlPlane) InstallCRDs(paths ...string) error {
	_, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}

// Stop stops what Start started, the API server and etcd last, and removes
// etcd's data.
func (cp *ControlPlane) Stop() error {
	for i := len(cp.stops) - 1; i >= 0; i-- {
		cp.stops[i]()
	}
	cp.stops = nil
	return cp.env.Stop()
}

// startProcess runs one of the assets' binaries, its output in dir, and
// registers its stop (SIGTERM, then SIGKILL after 10 s).
func (cp *ControlPlane) startProcess(dir, name string, args ...string) error {
	bin := filepath.Join(cp.Assets, name)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is not in the assets folder %s: %s", name, cp.Assets, HowToGet)
	}
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// A process that dies at once (a bad flag) is an error here, not a
	// long wait in every test.
	select {
	case err := <-done:
		logf.Close()
		return fmt.Errorf("%s exited at start (%v):\n%s", name, err, Tail(logPath))
	case <-time.After(2 * time.Second):
	}
	cp.stops = append(cp.stops, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	return nil
}

// Tail returns the last 20 lines of a file, for a message about the
// process that wrote it.
func Tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// HowToGet says how to get the binaries Start needs.
const HowToGet = "run `make test`, or go test with KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh): " +
	"the script (also `make envtest`) builds kube-apiserver, etcd, kube-controller-manager, kwok and kubectl " +
	"once from Go modules into ~/.cache/kv-hint-operator and prints their folder (docs/development.md)"

// Check reports whether dir holds kube-apiserver and etcd, and if not,
// what is missing and how to get it.
func Check(dir string) error {
	if dir == "" {
		return errors.New("no assets folder: " + HowToGet)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return fmt.Errorf("assets folder %s has no %s: %s", dir, bin, HowToGet)
		}
	}
	return nil
}

// FindAssets returns the folder holding kube-apiserver and etcd: the given
// one, else $KUBEBUILDER_ASSETS, else what hack/envtest-assets.sh (searched
// upwards from the working directory) builds or finds in its cache. The
// script's progress goes to progress, since a first build takes minutes.
func FindAssets(given string, progress *os.File) (string, error) {
	for _, dir := range []string{given, os.Getenv("KUBEBUILDER_ASSETS")} {
		if dir != "" {
			return dir, Check(dir)
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
	return dir, Check(dir)
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
