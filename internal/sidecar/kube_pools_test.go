package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestKubernetesRolePools runs a sidecar with only its router's ConfigMap,
// as compiled from RouterRoles whose workerSelectors pick prefill and
// decode pods, against a real API server: each role books only its own
// pool, a pod relabelled out of a pool stops getting that role's hints, a
// booking names only its copy's source pod and gets the endpoint the pod
// advertises, and a pod with a bad worker type is refused and counted.
func TestKubernetesRolePools(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)

	wp, wd := startWorker(t, "prefill-0"), startWorker(t, "decode-0")
	worker := func(name, component, endpoint string, extra map[string]string) *corev1.Pod {
		ann := map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: endpoint, wellknown.WorkerTypeAnnotation: component}
		for k, v := range extra {
			ann[k] = v
		}
		return testPod(name, map[string]string{"app.kubernetes.io/name": "llama", "app.kubernetes.io/component": component}, ann)
	}
	for _, p := range []*corev1.Pod{
		worker("prefill-0", "prefill", wp.HintEndpoint(), nil),
		worker("prefill-1", "prefill", "http://127.0.0.1:1/v1/hints", map[string]string{
			wellknown.SourceControlEndpointsAnnotation: `{"0": "tcp://10.0.0.7:23280", "1": "tcp://10.0.0.7:23281"}`,
		}),
		worker("decode-0", "decode", wd.HintEndpoint(), nil),
		// In the decode pool, but with a worker type no engine has.
		worker("banana-0", "decode", wd.HintEndpoint(), map[string]string{wellknown.WorkerTypeAnnotation: "banana"}),
		testPod("other-0", map[string]string{"app.kubernetes.io/name": "other"}, map[string]string{wellknown.CapabilitiesAnnotation: "router_hint"}),
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The ConfigMap as the manager compiles it from two RouterRoles.
	role := func(name, r, selType, component string, uid string) v1alpha1.RouterRole {
		return v1alpha1.RouterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Generation: 1},
			Spec: v1alpha1.RouterRoleSpec{
				Router: "llama", Role: r, WorkerSelection: v1alpha1.WorkerSelection{Type: selType},
				WorkerSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					"app.kubernetes.io/name": "llama", "app.kubernetes.io/component": component,
				}},
			},
		}
	}
	out := rolegraph.Compile(testCatalog(t), rolegraph.Input{RouterRoles: []v1alpha1.RouterRole{
		role("llama-prefill", "prefill", "kvcr", "prefill", "00000000-0000-0000-0000-000000000001"),
		role("llama-decode", "decode", "dynamo-default-cost-fn", "decode", "00000000-0000-0000-0000-000000000002"),
	}})
	cm := out.Router("llama").ConfigMap.DeepCopy()
	cm.OwnerReferences = nil // the RouterRoles are not in the API here
	if _, ok := cm.Data[wellknown.RolesKey]; !ok {
		t.Fatalf("compiled ConfigMap has no %s: %v", wellknown.RolesKey, cm.Data)
	}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Only --router: no selector flag.
	s, err := New(Options{
		Catalog: testCatalog(t), ConfigMap: wellknown.ConfigMapName("llama"), Namespace: ns, WorkerPods: true, Kube: kc,
		// The simulated workers listen on loopback, not on their pods' IPs.
		AllowAbsoluteHintEndpoints: true, AllowLoopbackHintEndpoints: true,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	pools := func() error {
		var got []string
		for _, wk := range s.Workers.List() {
			got = append(got, wk.ID+" "+strings.Join(wk.InPools, ","))
		}
		want := []string{"decode-0 decode", "prefill-0 prefill", "prefill-1 prefill"}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("workers and pools (-want +got):\n%s", diff)
		}
		return nil
	}
	testenv.Eventually(t, 10*time.Second, "the pools", func(context.Context) error { return pools() })
	if n := gathered(t, s.Metrics, "kvhint_router_workers_refused_total", map[string]string{"source": "pods"}); n < 1 {
		t.Errorf("the banana pod was not counted as refused")
	}

	// In pod mode nobody who reaches the listener registers or removes a
	// worker: the pods are the workers (the report: PUT and DELETE
	// answered under --router, and DELETE removed a pod's worker).
	for _, tc := range []struct{ method, id, body string }{
		{http.MethodPut, "intruder-0", `{"capabilities":["router_hint"],"hint_endpoint":"http://10.0.0.66:1/v1/hints"}`},
		{http.MethodPut, "decode-0", `{"capabilities":["router_hint"],"hint_endpoint":"http://10.0.0.66:1/v1/hints"}`},
		{http.MethodDelete, "decode-0", ""},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+s.BookingAddr()+"/v1/workers/"+tc.id, strings.NewReader(tc.body))
		resp := roundTrip(t, http.DefaultClient, req)
		if resp.status != http.StatusForbidden || !strings.Contains(resp.body, "registration over the API is off") {
			t.Errorf("%s /v1/workers/%s in pod mode: %d %s, want 403", tc.method, tc.id, resp.status, resp.body)
		}
	}
	if err := pools(); err != nil {
		t.Errorf("after the API attempts: %v", err)
	}

	book := func(id, role, worker, extra string) response {
		t.Helper()
		return post(t, s, "/v1/bookings", bookingJSON(id, role, worker, extra))
	}
	copyFrom := `"committed_kv_copy":{"source_worker":"prefill-1","source_rank":1,"block_hashes":[1,2,3,4]}`
	for _, tc := range []struct{ id, role, worker, outcome string }{
		{"p-on-p", "prefill", "prefill-0", "hinted"},
		{"p-on-d", "prefill", "decode-0", "not_in_pool"},
		{"d-on-p", "decode", "prefill-0", "not_in_pool"},
		{"p-on-other", "prefill", "other-0", "unknown_worker"},
	} {
		resp := book(tc.id, tc.role, tc.worker, copyFrom)
		if got := resp.header.Get(booking.HeaderOutcome); got != tc.outcome {
			t.Errorf("%s: outcome %q (%d %s), want %q", tc.id, got, resp.status, resp.body, tc.outcome)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := wp.WaitForHints(wctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if hashes, ep, _ := fetchOf(t, got[0].Body); ep != "tcp://10.0.0.7:23281" || len(hashes) != 4 {
		t.Errorf("prefill-0's fetch: endpoint %q, %d hashes; want the source's rank 1 endpoint", ep, len(hashes))
	}

	// Relabel prefill-0 out of the prefill pool (into decode's).
	p, err := pods.Get(ctx, "prefill-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["app.kubernetes.io/component"] = "decode"
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "prefill-0 in pool decode", func(context.Context) error {
		wk, ok := s.Workers.Get("prefill-0")
		if !ok || !cmp.Equal(wk.InPools, []string{"decode"}) {
			return fmt.Errorf("prefill-0 pools %v", wk.InPools)
		}
		return nil
	})
	before := wp.Accepted()
	if resp := book("p-after", "prefill", "prefill-0", copyFrom); resp.status != http.StatusNoContent || resp.header.Get(booking.HeaderOutcome) != "not_in_pool" {
		t.Errorf("prefill booking on the relabelled pod: %d %s", resp.status, resp.header.Get(booking.HeaderOutcome))
	}
	if resp := book("d-after", "decode", "prefill-0", ""); resp.header.Get(booking.HeaderOutcome) != "no_actions" && resp.header.Get(booking.HeaderOutcome) != "hinted" {
		t.Errorf("decode booking on the relabelled pod: %d %s", resp.status, resp.header.Get(booking.HeaderOutcome))
	}
	// Out of every pool: not a worker at all.
	p, _ = pods.Get(ctx, "prefill-0", metav1.GetOptions{})
	p.Labels["app.kubernetes.io/component"] = "gone"
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "prefill-0 unregistered", func(context.Context) error {
		if _, ok := s.Workers.Get("prefill-0"); ok {
			return fmt.Errorf("prefill-0 still registered")
		}
		return nil
	})
	if got := wp.Accepted(); got != before {
		t.Errorf("prefill-0 received %d hints after leaving the prefill pool", got-before)
	}
	for _, h := range wd.Hints() {
		if strings.Contains(string(h.Body), "kv.fetch") {
			t.Errorf("the decode worker received a prefill hint: %s", h.Body)
		}
	}
	if n := counter(t, s.Metrics, "bookings", "prefill", "not_in_pool"); n != 2 {
		t.Errorf("prefill not_in_pool bookings = %v, want 2", n)
	}
}

// TestKubernetesCandidatePods: with worker pods, a candidate whose decode
// pool picks other pods than the stable config's makes those pods workers
// while it is staged, books its canary on them, and lets them go when the
// rollout ends, against a real API server. Planted: the stable pool picks
// component=decode-v1 (pod old-0), the candidate's component=decode-v2
// (pod new-0). Before, new-0 was never a worker during the canary (the
// pod watch and the registry knew the stable pools alone).
func TestKubernetesCandidatePods(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx := context.Background()
	for id, component := range map[string]string{"old-0": "decode-v1", "new-0": "decode-v2"} {
		w := startWorker(t, id)
		ann := map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: w.HintEndpoint(), wellknown.WorkerTypeAnnotation: "decode"}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, testPod(id, map[string]string{"app": "llama", "component": component}, ann), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pooled := func(component string) string {
		return "decode:\n  routerMode: kv\n  workerSelector:\n    matchLabels: {app: llama, component: " + component + "}\n"
	}
	stable, cand := compiledData(fetchConfig, pooled("decode-v1")), compiledData(noFetchConfig, pooled("decode-v2"))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ConfigMapName("llama")}, Data: stable}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, testCatalog(t), "", func(o *Options) {
		o.ConfigMap, o.Namespace, o.WorkerPods, o.Kube = wellknown.ConfigMapName("llama"), ns, true, kc
		o.AllowAbsoluteHintEndpoints = true // the simulated workers listen on loopback, not on their pods' IPs
	})
	workersAre := func(what string, want ...string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, what, func(context.Context) error {
			var got []string
			for _, w := range s.Workers.List() {
				got = append(got, fmt.Sprintf("%s %v %v", w.ID, w.InPools, w.CandidatePools))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("workers, stable and candidate pools (-want +got):\n%s", diff)
			}
			return nil
		})
	}
	workersAre("the stable pool's pod alone", "old-0 [decode] []")

	candHash := compiled.Hash(cand)
	data, err := compiled.StagedData(stable, cand, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageCanary, Weight: 100})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = data
	if _, err := kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	workersAre("the candidate's pod a worker too", "new-0 [] [decode]", "old-0 [decode] []")
	resp := post(t, s, booking.Path, bookingJSON("canary-1", "decode", "new-0", `"session":{"id":"s1","turn":1}`))
	if resp.header.Get(booking.HeaderOutcome) != "hinted" || resp.header.Get(booking.HeaderConfigHash) != candHash {
		t.Errorf("a canary booking on new-0: outcome %q by config %q, want hinted by %s",
			resp.header.Get(booking.HeaderOutcome), resp.header.Get(booking.HeaderConfigHash), candHash)
	}

	cm.Data = stable
	if _, err := kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	workersAre("the candidate's pod gone with the rollout", "old-0 [decode] []")
}
