package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestPodReportsEjectedPolicies: in pod mode, a policy the dispatcher
// ejects appears on the sidecar's own Pod in
// hints.kvrouter.io/ejected-policies, and leaves it when the policy is
// re-admitted on probation.
func TestPodReportsEjectedPolicies(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, testPod("router-0", map[string]string{wellknown.RouterLabel: "llama"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, "decode-0")
	if _, err := pods.Create(ctx, testPod("decode-0", map[string]string{"app": "llama-worker"}, map[string]string{
		wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: w.HintEndpoint(), wellknown.WorkerTypeAnnotation: "decode",
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const doc = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-static, parameters: {tag: fast}}
      - {type: test-slow, name: audit, parameters: {sleep: 3ms}}
`
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ConfigMapName("llama")}, Data: compiledData(doc, decodeRoles)}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{
		Catalog: testCatalog(t), ConfigMap: wellknown.ConfigMapName("llama"), Namespace: ns,
		WorkerPods: true, WorkerSelector: labels.SelectorFromSet(labels.Set{"app": "llama-worker"}), AllowAbsoluteHintEndpoints: true,
		AllowLoopbackHintEndpoints: true, // the worker runs on loopback, not on a pod IP
		PodName:                    "router-0", PodNamespace: ns, Kube: kc,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: testLogger(t),
		PolicyDeadline:  time.Millisecond,
		PolicyIsolation: dispatch.IsolationOptions{HardDeadline: time.Second, EjectAfter: 2, EjectionBase: 2 * time.Second, EjectionMax: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	annotation := func() (string, bool) {
		p, err := pods.Get(ctx, "router-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := p.Annotations[wellknown.EjectedPoliciesAnnotation]
		return v, ok
	}
	testenv.Eventually(t, 10*time.Second, "decode-0 registered and a config applied", func(context.Context) error {
		if _, ok := s.Workers.Get("decode-0"); !ok || !s.Dispatcher.Ready() {
			return fmt.Errorf("not ready: worker registered %v, config %v", ok, s.Dispatcher.Ready())
		}
		return nil
	})
	for i := range 2 {
		if resp := post(t, s, "/v1/bookings", bookingJSON(fmt.Sprintf("slow-%d", i), "decode", "decode-0", "")); resp.status != http.StatusOK {
			t.Fatalf("booking: %d %s", resp.status, resp.body)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the ejected policy on the pod", func(context.Context) error {
		if v, _ := annotation(); v != "decode/audit=overrun" {
			return fmt.Errorf("%s = %q, want decode/audit=overrun", wellknown.EjectedPoliciesAnnotation, v)
		}
		return nil
	})
	// Re-admitted on probation after 2 s: nothing is ejected any more.
	testenv.Eventually(t, 10*time.Second, "the ejected policies annotation removed", func(context.Context) error {
		if v, ok := annotation(); ok {
			return fmt.Errorf("%s still %q", wellknown.EjectedPoliciesAnnotation, v)
		}
		return nil
	})
}
