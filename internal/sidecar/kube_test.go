package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/podreport"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// A real kube-apiserver and etcd, started by the first test that needs
// it (testenv.Get) and shared by the tests of the Kubernetes source; each
// test works in its own namespace.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{Name: "sidecar", Lazy: true}))
}

func testPod(name string, lbls, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/worker:1"}}},
	}
}

// TestKubernetesSidecar runs the sidecar as it runs in a router pod, against
// a real API server: config from the watched ConfigMap, workers from
// annotated pods, the applied hash written on its own Pod after every
// config it applies, and an invalid ConfigMap update kept out.
func TestKubernetesSidecar(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)

	// The sidecar's own pod.
	if _, err := pods.Create(ctx, testPod("router-0", map[string]string{wellknown.RouterLabel: "llama"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Worker pods: one that takes hints on a real simulated worker, one
	// without router_hint, one outside the selector.
	w := startWorker(t, "decode-0")
	for _, p := range []*corev1.Pod{
		testPod("decode-0", map[string]string{"app": "llama-worker"}, map[string]string{
			wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: w.HintEndpoint(), wellknown.WorkerTypeAnnotation: "decode",
		}),
		testPod("decode-1", map[string]string{"app": "llama-worker"}, nil),
		testPod("other-0", map[string]string{"app": "other"}, map[string]string{
			wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: w.HintEndpoint(),
		}),
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	v1 := roleConfig("v1")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ConfigMapName("llama")}, Data: compiledData(v1, decodeRoles)}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A ConfigMap of another router in the same namespace must be ignored.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ConfigMapName("other")}, Data: compiledData(invalidConfig, decodeRoles)}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	s, err := New(Options{
		Catalog: testCatalog(t), ConfigMap: wellknown.ConfigMapName("llama"), Namespace: ns,
		WorkerPods: true, WorkerSelector: labels.SelectorFromSet(labels.Set{"app": "llama-worker"}),
		AllowAbsoluteHintEndpoints: true, AllowLoopbackHintEndpoints: true, // the worker runs on loopback, not on a pod IP
		PodName: "router-0", PodNamespace: ns, Kube: kc,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	appliedHash := func() string {
		p, err := pods.Get(ctx, "router-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations[wellknown.AppliedHashAnnotation]
	}
	waitApplied := func(want string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, "the applied hash on the sidecar's pod", func(context.Context) error {
			if got := appliedHash(); got != want {
				return fmt.Errorf("pod annotation %s = %q, want %q", wellknown.AppliedHashAnnotation, got, want)
			}
			return nil
		})
	}
	waitApplied(compiledHashOf(v1))
	testenv.Eventually(t, 10*time.Second, "the sidecar ready", func(context.Context) error {
		resp, err := http.Get("http://" + s.OpsAddr() + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})

	// Workers: the selected pods, with their annotations.
	testenv.Eventually(t, 10*time.Second, "the selected pods registered as workers", func(context.Context) error {
		var ids []string
		for _, wk := range s.Workers.List() {
			ids = append(ids, fmt.Sprintf("%s capable=%v", wk.ID, wk.Capable))
		}
		if diff := cmp.Diff([]string{"decode-0 capable=true", "decode-1 capable=false"}, ids); diff != "" {
			return fmt.Errorf("workers (-want +got):\n%s", diff)
		}
		return nil
	})
	resp := post(t, s, "/v1/bookings", bookingJSON("k8s-1", "decode", "decode-0", ""))
	if resp.status != http.StatusOK {
		t.Fatalf("booking: %d %s", resp.status, resp.body)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := w.WaitForHints(wctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := message("k8s-1", staticJSON(1, "v1")); string(got[0].Body) != want {
		t.Errorf("worker received %s, want %s", got[0].Body, want)
	}

	// A config update reaches the sidecar through the watch, and the pod
	// says so.
	v2 := roleConfig("v2")
	cm.Data[wellknown.HintsConfigKey] = v2
	if _, err := kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitApplied(compiledHashOf(v2))
	waitHash(t, s.Dispatcher, compiledHashOf(v2))

	// An invalid update is refused: v2 stays, on the pod too.
	cm.Data[wellknown.HintsConfigKey] = invalidConfig
	if _, err := kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the invalid ConfigMap update refused", func(context.Context) error {
		if n := counter(t, s.Metrics, "reloads", "failure"); n < 1 {
			return fmt.Errorf("the invalid update was not seen yet")
		}
		return nil
	})
	if got := appliedHash(); got != compiledHashOf(v2) {
		t.Errorf("after an invalid update the pod says %q, want the last good %q", got, compiledHashOf(v2))
	}

	// A worker pod that goes away leaves the registry.
	if err := pods.Delete(ctx, "decode-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "decode-1 unregistered", func(context.Context) error {
		if _, ok := s.Workers.Get("decode-1"); ok {
			return fmt.Errorf("decode-1 still registered")
		}
		return nil
	})
}

// TestPodReporterLatestWins reports hashes faster than they can be written
// and while the pod does not exist yet: the retries end with the latest.
func TestPodReporterLatestWins(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := podreport.New(kc, ns, "late-pod")
	go r.Run(ctx, testLogger(t))
	for i := range 5 {
		r.Report(fmt.Sprintf("hash-%d", i))
	}
	// The pod appears only now: the first patches fail with NotFound and
	// are retried with backoff.
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, testPod("late-pod", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the applied hash on the late pod", func(context.Context) error {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, "late-pod", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := p.Annotations[wellknown.AppliedHashAnnotation]; got != "hash-4" {
			return fmt.Errorf("annotation %q, want hash-4", got)
		}
		return nil
	})
}
