package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
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
	kubeconfig  string
	stopManager func()
	// managerMetrics holds the running manager's own metrics
	// (controllers.RegisterMetrics), a registry per manager started.
	managerMetrics *prometheus.Registry
)

// timeout bounds every wait on the manager; on these machines a reconcile
// takes milliseconds, but a loaded CI box is slow.
const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

// noAPIServer says why the tests that need kube-apiserver and etcd skip;
// empty when KUBEBUILDER_ASSETS is set and the suite started them.
var noAPIServer string

// requireAPIServer skips a test that needs the suite's API server when
// KUBEBUILDER_ASSETS is not set (a bare go test ./..., make unit).
func requireAPIServer(t *testing.T) {
	t.Helper()
	if noAPIServer != "" {
		t.Skip(noAPIServer)
	}
}

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		// go test ./... without make: the tests that need no API server
		// still run; the others skip with this message.
		noAPIServer = "KUBEBUILDER_ASSETS is not set; run `make test`, or KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh) go test ./controllers/"
		return m.Run()
	}
	logOut := io.Discard
	if testing.Verbose() {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logOut)))

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	if restCfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "controllers: starting kube-apiserver and etcd:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "controllers: stopping the control plane:", err)
		}
	}()
	dir, err := os.MkdirTemp("", "kvhint-controllers-")
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
	if k8s, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if stopManager, err = startManager(); err != nil {
		fmt.Fprintln(os.Stderr, "controllers: starting the manager:", err)
		return 1
	}
	defer func() { stopManager() }()
	return m.Run()
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

// newNamespace creates a namespace for one test. envtest runs no namespace
// controller, so a deleted namespace stays Terminating with its objects;
// names never repeat, so that does no harm.
func newNamespace(t *testing.T) string {
	t.Helper()
	requireAPIServer(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kvhint-test-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// eventually polls check until it returns nil, and fails the test with
// its last error when timeout passes first.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not true within %s: %v", what, timeout, last)
	}
}

// waitCondition waits until the object's condition has the status and
// reason wanted, for the object's current generation (except Programmed,
// whose observedGeneration is the generation that runs), and returns it.
func waitCondition(t *testing.T, obj client.Object, typ v1alpha1.ConditionType, status metav1.ConditionStatus, reason v1alpha1.ConditionReason) metav1.Condition {
	t.Helper()
	return waitConditionMessage(t, obj, typ, status, reason, "")
}

// waitConditionMessage is waitCondition that also waits for the message
// to contain a text.
func waitConditionMessage(t *testing.T, obj client.Object, typ v1alpha1.ConditionType, status metav1.ConditionStatus, reason v1alpha1.ConditionReason, contains string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, fmt.Sprintf("%T %s: %s=%s reason %s %q", obj, obj.GetName(), typ, status, reason, contains), func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conditionsOf(obj), string(typ))
		switch {
		case c == nil:
			return fmt.Errorf("no %s condition yet", typ)
		case c.Status != status || c.Reason != string(reason) || !strings.Contains(c.Message, contains):
			return fmt.Errorf("%s=%s reason %s: %s", typ, c.Status, c.Reason, c.Message)
		case typ != v1alpha1.ConditionProgrammed && c.ObservedGeneration != obj.GetGeneration():
			return fmt.Errorf("%s is for generation %d, the object is at %d", typ, c.ObservedGeneration, obj.GetGeneration())
		}
		got = *c
		return nil
	})
	return got
}

func conditionsOf(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *v1alpha1.RouterRole:
		return o.Status.Conditions
	case *v1alpha1.HintPolicy:
		return o.Status.Conditions
	}
	return nil
}

// waitConfigMap waits until the router's ConfigMap satisfies check.
func waitConfigMap(t *testing.T, ns, router string, check func(cm *corev1.ConfigMap) error) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	eventually(t, "ConfigMap "+v1alpha1.HintsConfigMapName(router), func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.HintsConfigMapName(router)}, cm); err != nil {
			return err
		}
		return check(cm)
	})
	return cm
}

func anyConfigMap(*corev1.ConfigMap) error { return nil }

// routerPod creates a router pod. envtest runs no scheduler or kubelet:
// the pod stays Pending, which is all Programmed looks at.
func routerPod(t *testing.T, ns, router, name, appliedHash string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{v1alpha1.RouterLabel: router},
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptrTo(false),
			Containers:                   []corev1.Container{{Name: "router", Image: "router:test"}},
		},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
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
	objs := decodeObjects(t, data)
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := k8s.Create(context.Background(), o); err != nil {
			return objs, err
		}
	}
	return objs, nil
}

func decodeObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// kubectl runs kubectl against the test API server: the one
// hack/envtest-assets.sh builds into KUBEBUILDER_ASSETS, else one on PATH.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("kubectl"); err != nil {
			t.Fatal("kubectl is neither in KUBEBUILDER_ASSETS nor on PATH; hack/envtest-assets.sh builds it")
		}
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
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
