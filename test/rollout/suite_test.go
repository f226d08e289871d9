// Package rollout tests restart-mode routers end to end: real Deployment
// rollouts, with kube-controller-manager (its deployment, replicaset and
// garbage collector controllers) running against the suite's
// kube-apiserver and etcd, and kwok playing the kubelet for fake nodes so
// that the pods the ReplicaSets create become Running and Ready. No test
// writes pod status itself. The manager runs in the test process, as
// `kvhint manager` builds it.
package rollout

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
	"github.com/kvrouter/kv-hint-operator/internal/testing/managertest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
)

var (
	restCfg *rest.Config
	scheme  *runtime.Scheme
	k8s     client.Client // uncached, as the admin
)

// node is the fake node kwok runs every router pod on; pod templates name
// it in spec.nodeName, since no scheduler runs.
const node = controlplane.FakeNode

// timeout bounds every wait. A 30-replica rollout takes a while on a
// loaded two-core machine.
const timeout = 3 * time.Minute

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{
		Name:        "rollout",
		ProductCRDs: true,
		// Pods are admitted as on a cluster: the ServiceAccount plugin
		// adds its token volume before the injection policy sees a pod.
		AdmitAsClusters:       true,
		KubeControllerManager: true,
		Kwok:                  true,
		Setup:                 setup,
	}))
}

func setup(env *testenv.Env) (func(), error) {
	restCfg = env.Config
	var err error
	if scheme, err = controllers.NewScheme(); err != nil {
		return nil, err
	}
	// The admin's client also knows Dynamo's DGD; the manager's scheme
	// does not (it reads DGDs unstructured, as in a cluster).
	adminScheme, err := controllers.NewScheme()
	if err == nil {
		err = dynamo.AddToScheme(adminScheme)
	}
	if err != nil {
		return nil, err
	}
	if k8s, err = client.New(restCfg, client.Options{Scheme: adminScheme}); err != nil {
		return nil, err
	}
	stopManager, err := startManager()
	if err != nil {
		return nil, fmt.Errorf("starting the manager: %w", err)
	}
	// Dynamo: its DGD CRD appears only now, after the manager started
	// without it (as on a cluster where Dynamo is installed later), and a
	// stand-in for Dynamo's operator renders DGDs into Deployments.
	if err := env.InstallDynamoCRD(); err != nil {
		stopManager()
		return nil, fmt.Errorf("installing the DynamoGraphDeployment CRD: %w", err)
	}
	stopDynamo, err := dynamo.Start(restCfg)
	if err != nil {
		stopManager()
		return nil, fmt.Errorf("starting the stand-in for Dynamo's operator: %w", err)
	}
	return func() {
		if err := stopDynamo(); err != nil {
			fmt.Fprintln(os.Stderr, "rollout: the stand-in for Dynamo's operator stopped with:", err)
		}
		stopManager()
	}, nil
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
	// The DGD CRD is looked for every 200 ms, not every 10 s: it is
	// installed after the manager starts (run).
	opts := controllers.Options{CatalogLimits: controllers.DefaultCatalogLimits(), GraphDiscoveryInterval: 200 * time.Millisecond}
	return managertest.Start(cfg, managertest.Options{Name: "rollout", Scheme: scheme, Controllers: &opts})
}

func requireEnv(t testing.TB) {
	t.Helper()
	testenv.Get(t)
}
