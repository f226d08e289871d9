package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
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

// startManager runs the manager as `kvhint manager` builds it (same cache
// options, indexes and reconcilers), and returns a function that stops it
// and waits until it has.
func startManager() (func(), error) {
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.CacheOptions(nil),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The restart test builds a second manager in the same process.
		Controller: config.Controller{SkipNameValidation: ptrTo(true)},
		NewClient:  countingApplies,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := controllers.Setup(ctx, mgr, builtin.NewCatalog()); err != nil {
		cancel()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := controllers.RegisterMetrics(reg, mgr); err != nil {
		cancel()
		return nil, err
	}
	managerMetrics = reg
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, timeout)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return nil, errors.New("the manager's caches did not sync")
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "controllers: manager stopped with:", err)
		}
	}, nil
}

func ptrTo[T any](v T) *T { return &v }

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

// waitConfigMap waits until the router's ConfigMap satisfies check.
func waitConfigMap(t *testing.T, ns, router string, check func(cm *corev1.ConfigMap) error) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	testenv.Eventually(t, timeout, "ConfigMap "+v1alpha1.HintsConfigMapName(router), func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.HintsConfigMapName(router)}, cm); err != nil {
			return err
		}
		return check(cm)
	})
	return cm
}

func anyConfigMap(*corev1.ConfigMap) error { return nil }

// routerPod creates a router pod and, with appliedHash, reports that
// hash on it as its sidecar would. No kubelet runs it: the pod stays
// Pending, which is all Programmed looks at.
func routerPod(t *testing.T, ns, router, name, appliedHash string) *corev1.Pod {
	t.Helper()
	pod := testenv.RouterPod(ns, name, router)
	testenv.Create(t, k8s, pod)
	if appliedHash != "" {
		reportHash(t, pod, appliedHash)
	}
	return pod
}

// reportHash does what the sidecar does once it runs a config: it writes
// the config's hash on its own Pod, as field manager kvhint-sidecar.
func reportHash(t *testing.T, pod *corev1.Pod, hash string) {
	t.Helper()
	annotatePod(t, pod, hash, v1alpha1.SidecarFieldManager)
}

// annotatePod writes the applied-hash annotation as fieldManager.
func annotatePod(t *testing.T, pod *corev1.Pod, hash, fieldManager string) {
	t.Helper()
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[v1alpha1.AppliedHashAnnotation] = hash
	if err := k8s.Patch(context.Background(), pod, patch, client.FieldOwner(fieldManager)); err != nil {
		t.Fatalf("annotating pod %s: %v", pod.Name, err)
	}
}

// applyFile creates every object of a YAML file in ns, the way
// `kubectl create -n ns -f FILE` would, and returns them.
func applyFile(t *testing.T, ns, path string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.Objects(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := k8s.Create(context.Background(), o); err != nil {
			return objs, err
		}
	}
	return objs, nil
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
