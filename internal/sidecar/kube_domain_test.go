package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestKubernetesTopologyDomains runs the sidecar in pod mode against a
// real API server, with worker pods that carry their topology as
// Dynamo's operator leaves it for a DGD's kvTransferPolicy (the
// nvidia.com/dynamo-topology.<domain> labels of a ClusterTopology, or a
// node label under its own key that nvidia.com/topology-label-key names)
// and the sidecar's annotations for the transfer policy. Bookings over
// loopback HTTP: a worker that requires its zone gets a kv.fetch from a
// source in its zone only, however the source's zone was published; a pod
// whose policy breaks Dynamo's rules is not registered, and is counted.
func TestKubernetesTopologyDomains(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)
	const config = "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n      - type: kv-fetch\n      - type: kv-retain\n        parameters: {ttl_seconds: 600}\n"

	if _, err := pods.Create(ctx, testPod("router-0", map[string]string{wellknown.RouterLabel: "llama"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	worker := func(extra map[string]string) map[string]string {
		ann := map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.WorkerTypeAnnotation: "decode"}
		for k, v := range extra {
			ann[k] = v
		}
		return ann
	}
	grove := func(zone, rack string) map[string]string {
		return map[string]string{"app": "llama-worker", "nvidia.com/dynamo-topology.zone": zone, "nvidia.com/dynamo-topology.rack": rack}
	}
	for _, p := range []*corev1.Pod{
		// The booked worker: zone us-east-1a from a ClusterTopology, and a
		// required transfer domain.
		testPod("decode-a", grove("us-east-1a", "rack-1"), worker(map[string]string{wellknown.KVTransferDomainAnnotation: "zone"})),
		// Sources: the same zone through a labelKey node label; another
		// zone in the same rack.
		testPod("src-a", map[string]string{"app": "llama-worker", "topology.kubernetes.io/zone": "us-east-1a"},
			worker(map[string]string{"nvidia.com/topology-label-key": "topology.kubernetes.io/zone", wellknown.KVTransferDomainAnnotation: "zone",
				wellknown.KVTransferEnforcementAnnotation: "preferred", wellknown.KVTransferPreferredWeightAnnotation: "0.5"})),
		testPod("src-b", grove("us-east-1b", "rack-1"), worker(nil)),
		// Preferred without its weight: refused, as Dynamo refuses it.
		testPod("bad-0", grove("us-east-1a", "rack-1"), worker(map[string]string{wellknown.KVTransferDomainAnnotation: "zone", wellknown.KVTransferEnforcementAnnotation: "preferred"})),
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ConfigMapName("llama")}, Data: compiledData(config, decodeRoles)}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	s, err := New(Options{
		Catalog: testCatalog(t), ConfigMap: wellknown.ConfigMapName("llama"), Namespace: ns,
		WorkerPods: true, WorkerSelector: labels.SelectorFromSet(labels.Set{"app": "llama-worker"}),
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
	waitHash(t, s.Dispatcher, compiledHashOf(config))
	testenv.Eventually(t, 10*time.Second, "the domain's workers registered", func(context.Context) error {
		for _, id := range []string{"decode-a", "src-a", "src-b"} {
			if _, ok := s.Workers.Get(id); !ok {
				return fmt.Errorf("%s not registered yet", id)
			}
		}
		if n := gathered(t, s.Metrics, "kvhint_router_workers_refused_total", map[string]string{"source": "pods"}); n < 1 {
			return fmt.Errorf("bad-0 not refused yet")
		}
		return nil
	})
	if _, ok := s.Workers.Get("bad-0"); ok {
		t.Error("bad-0, preferred without a weight, is registered")
	}
	if wk, _ := s.Workers.Get("src-a"); wk.TopologyDomains["zone"] != "us-east-1a" {
		t.Errorf("src-a's topology domains %v, want zone us-east-1a from its node label", wk.TopologyDomains)
	}

	for _, tc := range []struct {
		source string
		fetch  bool
	}{{"src-a", true}, {"src-b", false}} {
		extra := `"session":{"id":"s1","turn":2,"final":false},"committed_kv_copy":{"source_worker":"` + tc.source + `","source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,22]}`
		resp := post(t, s, "/v1/bookings", bookingJSON("k8s-"+tc.source, "decode", "decode-a", extra))
		if resp.status != http.StatusOK {
			t.Fatalf("from %s: %d %s", tc.source, resp.status, resp.body)
		}
		if got := strings.Contains(resp.body, `"kv.fetch"`); got != tc.fetch {
			t.Errorf("from %s: kv.fetch sent %v, want %v: %s", tc.source, got, tc.fetch, resp.body)
		}
	}
	if n := gathered(t, s.Metrics, "kvhint_router_kv_copies_dropped_total", map[string]string{"role": "decode", "reason": "outside_domain"}); n != 1 {
		t.Errorf("outside_domain drops %v, want 1", n)
	}
}
