// Package rollout tests restart-mode routers end to end: real Deployment
// rollouts, with kube-controller-manager (its deployment, replicaset and
// garbage collector controllers) running against the suite's
// kube-apiserver and etcd, and kwok playing the kubelet for fake nodes so
// that the pods the ReplicaSets create become Running and Ready. No test
// writes pod status itself. The manager runs in the test process, as
// `kvhint manager` builds it.
package rollout

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/devenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
)

var (
	restCfg    *rest.Config
	scheme     *runtime.Scheme
	k8s        client.Client // uncached, as the admin
	kubeconfig string
	assets     string
	skipWhy    string
)

// node is the fake node kwok runs every router pod on; pod templates name
// it in spec.nodeName, since no scheduler runs.
const node = "kwok-node-0"

// timeout bounds every wait. A 30-replica rollout takes a while on a
// loaded two-core machine.
const timeout = 3 * time.Minute

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	assets = os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		skipWhy = "KUBEBUILDER_ASSETS is not set; run make test"
		return m.Run()
	}
	logOut := io.Discard
	if os.Getenv("KVHINT_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logOut)))

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// Pods are admitted as on a cluster: the ServiceAccount plugin adds
	// its token volume before the injection policy sees a pod.
	devenv.AdmitAsClusters(env)
	var err error
	if restCfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "rollout: starting kube-apiserver and etcd:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "kvhint-rollout-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if scheme, err = controllers.NewScheme(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The admin's client also knows Dynamo's DGD; the manager's scheme
	// does not (it reads DGDs unstructured, as in a cluster).
	adminScheme, err := controllers.NewScheme()
	if err == nil {
		err = dynamo.AddToScheme(adminScheme)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(restCfg, client.Options{Scheme: adminScheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// kube-controller-manager: the controllers a Deployment rollout needs
	// (deployment, replicaset), the garbage collector, which removes
	// the pods of the ReplicaSets the deployment controller prunes from
	// the revision history, and the serviceaccount controller, which
	// creates the "default" ServiceAccount the ServiceAccount plugin wants
	// in every namespace. Serving off: nothing here scrapes it.
	stopKCM, err := startProcess(dir, "kube-controller-manager",
		"--kubeconfig="+kubeconfig,
		"--controllers=deployment,replicaset,garbagecollector,serviceaccount",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-deployment-syncs=5",
		"--concurrent-replicaset-syncs=5",
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout:", err)
		return 1
	}
	defer stopKCM()

	// kwok: the fake node and its pods' lifecycle, with kwok's own fast
	// stages (hack/envtest-assets.sh ships them as kwok-stages.yaml).
	stopKwok, err := startProcess(dir, "kwok",
		"--kubeconfig="+kubeconfig,
		"--config="+filepath.Join(assets, "kwok-stages.yaml"),
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-port=0",
		"--cidr=10.0.0.1/16",
		"--node-ip=10.0.0.1",
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout:", err)
		return 1
	}
	defer stopKwok()
	fake := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        node,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels:      map[string]string{"type": "kwok"},
	}}
	if err := k8s.Create(context.Background(), fake); err != nil {
		fmt.Fprintln(os.Stderr, "rollout: creating the fake node:", err)
		return 1
	}

	stopManager, err := startManager()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout: starting the manager:", err)
		return 1
	}
	defer stopManager()

	// Dynamo: its DGD CRD appears only now, after the manager started
	// without it (as on a cluster where Dynamo is installed later), and a
	// stand-in for Dynamo's operator renders DGDs into Deployments.
	if _, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{
		Paths: []string{dynamo.CRDPath(filepath.Join("..", ".."))}, ErrorIfPathMissing: true,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "rollout: installing the DynamoGraphDeployment CRD:", err)
		return 1
	}
	stopDynamo, err := dynamo.Start(restCfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rollout: starting the stand-in for Dynamo's operator:", err)
		return 1
	}
	defer func() {
		if err := stopDynamo(); err != nil {
			fmt.Fprintln(os.Stderr, "rollout: the stand-in for Dynamo's operator stopped with:", err)
		}
	}()
	return m.Run()
}

// startProcess runs one of the assets' binaries, its output in dir, and
// returns a function that stops it (SIGTERM, then SIGKILL).
func startProcess(dir, name string, args ...string) (func(), error) {
	bin := filepath.Join(assets, name)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s is not in KUBEBUILDER_ASSETS (%s): run hack/envtest-assets.sh", name, assets)
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// A process that dies at once (a bad flag) is an error here, not a
	// three-minute wait in every test.
	select {
	case err := <-done:
		logf.Close()
		return nil, fmt.Errorf("%s exited at start (%v):\n%s", name, err, tail(filepath.Join(dir, name+".log")))
	case <-time.After(2 * time.Second):
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}, nil
}

func tail(path string) string {
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

// writes counts the manager's API writes (every request that is not a
// read), by method and resource, from its own HTTP transport.
var writes = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// writesSnapshot returns the counts so far.
func writesSnapshot() map[string]int {
	writes.Lock()
	defer writes.Unlock()
	out := make(map[string]int, len(writes.n))
	for k, v := range writes.n {
		out[k] = v
	}
	return out
}

type countWrites struct{ next http.RoundTripper }

func (c countWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		key := req.Method + " " + resourceOf(req.URL.Path)
		if err == nil && resp.StatusCode >= 300 {
			// Refused writes (a 409 on a stale status) count too, apart.
			key += " " + strconv.Itoa(resp.StatusCode)
		}
		writes.Lock()
		writes.n[key]++
		writes.Unlock()
	}
	return resp, err
}

// resourceOf turns /api/v1/namespaces/ns/configmaps/name into configmaps,
// /apis/apps/v1/namespaces/ns/deployments/name into deployments, and
// keeps a subresource: routerroles/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) >= 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	return path
}

// startManager runs the manager as `kvhint manager` builds it, its writes
// counted.
func startManager() (func(), error) {
	cfg := rest.CopyConfig(restCfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countWrites{rt} }
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.CacheOptions(nil),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The DGD CRD is looked for every 200 ms, not every 10 s: it is
	// installed after the manager starts (run).
	opts := controllers.Options{CatalogLimits: controllers.DefaultCatalogLimits(), GraphDiscoveryInterval: 200 * time.Millisecond}
	if err := controllers.SetupWithOptions(ctx, mgr, builtin.NewCatalog(), opts); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return nil, errors.New("the manager's caches did not sync")
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "rollout: manager stopped with:", err)
		}
	}, nil
}

func requireEnv(t *testing.T) {
	t.Helper()
	if restCfg == nil {
		t.Skip(skipWhy)
	}
}
