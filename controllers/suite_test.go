package controllers_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/managertest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// One kube-apiserver and etcd for the package, and one manager running
// both reconcilers over every namespace; each test works in a namespace of
// its own. Tests do not run in parallel: TestLastGoodSurvivesRestart stops
// and restarts the shared manager.
var (
	restCfg     *rest.Config
	scheme      *runtime.Scheme
	k8s         client.Client // uncached: what the API server holds now
	stopManager func()
	// managerMetrics holds the running manager's own metrics
	// (controllers.RegisterMetrics), a registry per manager started.
	managerMetrics *prometheus.Registry
)

// timeout bounds every wait on the manager; on these machines a reconcile
// takes milliseconds, but a loaded CI box is slow.
const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	var err error
	if scheme, err = controllers.NewScheme(); err != nil {
		fmt.Fprintln(os.Stderr, "controllers:", err)
		os.Exit(1)
	}
	os.Exit(testenv.Run(m, testenv.Options{
		Name:        "controllers",
		ProductCRDs: true,
		Scheme:      scheme,
		Setup: func(env *testenv.Env) (func(), error) {
			restCfg, k8s = env.Config, env.Client
			var err error
			if stopManager, err = startManager(); err != nil {
				return nil, fmt.Errorf("starting the manager: %w", err)
			}
			// The restart tests replace stopManager: stop the one running.
			return func() { stopManager() }, nil
		},
	}))
}

// startManager runs the manager as `kvhint manager` builds it, its
// ConfigMap applies counted and its metrics in managerMetrics, and
// returns a function that stops it and waits until it has.
func startManager() (func(), error) {
	reg := prometheus.NewRegistry()
	stop, err := managertest.Start(restCfg, managertest.Options{
		Name:      "controllers",
		Scheme:    scheme,
		NewClient: countingApplies,
		Metrics:   reg,
		// The restart tests build a second manager in the same process.
		Restartable: true,
	})
	if err != nil {
		return nil, err
	}
	managerMetrics = reg
	return stop, nil
}

// applies counts the manager's server-side applies by object name. An
// apply that changes nothing leaves resourceVersion alone, so only a count
// of requests tells "no write" from "a write that changed nothing".
var applies = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

func appliesTo(ns, name string) int {
	applies.Lock()
	defer applies.Unlock()
	return applies.n[ns+"/"+name]
}

// countingApplies is the manager's client with every Apply counted.
func countingApplies(cfg *rest.Config, opts client.Options) (client.Client, error) {
	c, err := client.NewWithWatch(cfg, opts)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if cm, ok := obj.(*corev1ac.ConfigMapApplyConfiguration); ok {
				applies.Lock()
				applies.n[*cm.GetNamespace()+"/"+*cm.GetName()]++
				applies.Unlock()
			}
			return c.Apply(ctx, obj, opts...)
		},
	}), nil
}

func get[T client.Object](t *testing.T, ns, name string, obj T) T {
	t.Helper()
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return obj
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func keyOf(o client.Object) client.ObjectKey { return client.ObjectKeyFromObject(o) }
