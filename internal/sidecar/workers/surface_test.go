package workers

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestValidateWorkerID: an ID is valid UTF-8 of a DNS-like charset within
// the length cap; each refusal says what is wrong.
func TestValidateWorkerID(t *testing.T) {
	for _, tc := range []struct{ id, why string }{
		{"decode-0", ""},
		{"llama-prefill-0.llama.svc", ""},
		{"worker_7", ""},
		{"7587888160958628000", ""},
		{strings.Repeat("a", MaxWorkerIDLength), ""},
		{"", "required"},
		{"\xff", "not valid UTF-8"},
		{"a\x00b", `'\x00'`},
		{"a\nb", `'\n'`},
		{"a\u200fb", `'\u200f'`},
		{"a\u202eb", `'\u202e'`},
		{"dé", `'é'`},
		{"a/b", `'/'`},
		{"a b", `' '`},
		{"-a", "start and end"},
		{"a.", "start and end"},
		{strings.Repeat("a", MaxWorkerIDLength+1), "over the 253"},
	} {
		err := ValidateWorkerID(tc.id)
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%q refused: %v", tc.id, err)
		case tc.why != "" && err == nil:
			t.Errorf("%q accepted, want refused (%s)", tc.id, tc.why)
		case err != nil && !strings.Contains(err.Error(), tc.why):
			t.Errorf("%q: error %q does not say %s", tc.id, err, tc.why)
		}
	}
}

// TestSourcesOwnTheirWorkers: no source replaces or removes a worker
// another source registered (the report: a PUT replaced the file's
// worker, a DELETE removed a pod's); each changes its own.
func TestSourcesOwnTheirWorkers(t *testing.T) {
	r := NewRegistry(&fakeDelivery{})
	if err := r.Replace(SourceFile, []WorkerSpec{{ID: "f"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(SourcePods, WorkerSpec{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"f", "p"} {
		if err := r.Set(SourceAPI, WorkerSpec{ID: id, Capabilities: []string{dispatch.CapabilityRouterHint}}); !errors.Is(err, ErrOtherSource) {
			t.Errorf("API Set of %s: %v, want ErrOtherSource", id, err)
		}
		if err := r.Delete(SourceAPI, id); !errors.Is(err, ErrOtherSource) {
			t.Errorf("API Delete of %s: %v, want ErrOtherSource", id, err)
		}
	}
	if err := r.Replace(SourceFile, []WorkerSpec{{ID: "f"}, {ID: "p"}}); !errors.Is(err, ErrOtherSource) || !strings.Contains(err.Error(), "workers[1]") {
		t.Errorf("file Replace naming the pod's worker: %v, want ErrOtherSource for workers[1]", err)
	}
	if err := r.Delete(SourcePods, "f"); !errors.Is(err, ErrOtherSource) {
		t.Errorf("pods Delete of the file's worker: %v, want ErrOtherSource", err)
	}
	if err := r.Delete(SourceAPI, "nobody"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Delete of an unknown worker: %v, want ErrNotRegistered", err)
	}
	for id, src := range map[string]string{"f": SourceFile, "p": SourcePods} {
		if w, ok := r.Get(id); !ok || w.Source != src || w.Capable {
			t.Errorf("worker %s is %+v after the attempts, want the %s worker unchanged", id, w, src)
		}
	}
	if err := r.Delete(SourcePods, "p"); err != nil {
		t.Errorf("pods Delete of its own worker: %v", err)
	}
}

// TestReplaceNamesEveryBadEntry: a list with several bad entries is
// refused whole, and the error names each, under the registry's endpoint
// rules too.
func TestReplaceNamesEveryBadEntry(t *testing.T) {
	r := NewRegistry(&fakeDelivery{})
	r.Endpoints = &endpoint.Policy{}
	if err := r.Replace(SourceFile, []WorkerSpec{{ID: "good"}}); err != nil {
		t.Fatal(err)
	}
	capable := func(id, ep string) WorkerSpec {
		return WorkerSpec{ID: id, Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: ep}
	}
	err := r.Replace(SourceFile, []WorkerSpec{{ID: "good"}, capable("lo", "http://127.0.0.1:15000/"), {ID: "x", WorkerType: "banana"}, capable("md", "http://[64:ff9b::a9fe:a9fe]/")})
	if err == nil {
		t.Fatal("a list with bad entries was accepted")
	}
	for _, want := range []string{"workers[1]: worker lo", "loopback", "workers[2]: worker x", "banana", "workers[3]: worker md", "169.254.169.254"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n, _ := r.Stats(); n != 1 {
		t.Errorf("%d workers after a refused list, want the last good one", n)
	}
}

// TestRoleWithoutPoolFailsClosed: while pools are in force, a role the
// pools miss admits no worker (the report: every worker was in it); a
// role whose pool selects everything admits every one; with no pools at
// all (a policy file on its own) every role admits every worker.
func TestRoleWithoutPoolFailsClosed(t *testing.T) {
	r := NewRegistry(nil)
	if err := r.Set(SourceAPI, WorkerSpec{ID: "w", Labels: map[string]string{"pool": "a"}}); err != nil {
		t.Fatal(err)
	}
	if !r.lookup("w").InPool("decode") {
		t.Error("with no pools in force, decode does not admit w")
	}
	r.SetPools(map[string]labels.Selector{"decode": labels.SelectorFromSet(labels.Set{"pool": "a"}), "any": labels.Everything()})
	for role, want := range map[string]bool{"decode": true, "any": true, "prefill": false} {
		if got := r.lookup("w").InPool(role); got != want {
			t.Errorf("role %s admits w: %v, want %v", role, got, want)
		}
	}
	r.SetPools(map[string]labels.Selector{})
	if r.lookup("w").InPool("decode") {
		t.Error("pools in force with none for decode, and decode admits w")
	}
}

// TestPodEndpointsUnderPolicy: a worker pod's annotation is held to the
// sidecar's endpoint rules, absolute URLs under
// --allow-absolute-hint-endpoints included (the report: another pod's
// annotation could post to the router pod's 127.0.0.1:15000/quitquitquit).
func TestPodEndpointsUnderPolicy(t *testing.T) {
	r := NewRegistry(&fakeDelivery{})
	r.Endpoints = &endpoint.Policy{}
	r.Endpoints.SetOwn([]netip.Addr{netip.MustParseAddr("10.0.0.9")}, nil)
	p := &PodWorkers{Registry: r, AllowAbsoluteEndpoints: true}
	pod := func(ip, ep string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: ep}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
		}
	}
	for _, tc := range []struct {
		ip, ep string
		ok     bool
	}{
		{"10.0.0.6", ":8081/v1/hints", true},
		{"10.0.0.6", "http://10.0.0.7:8081/v1/hints", true},
		{"10.0.0.6", "http://127.0.0.1:15000/quitquitquit", false},
		{"10.0.0.6", "http://[::ffff:127.0.0.1]:15000/quitquitquit", false},
		{"10.0.0.6", "http://localhost:15000/quitquitquit", false},
		{"10.0.0.6", "http://2130706433:15000/quitquitquit", false},
		{"10.0.0.6", "http://[64:ff9b::a9fe:a9fe]/latest/meta-data", false},
		{"10.0.0.9", ":15000/quitquitquit", false}, // a pod on the router pod's own IP
	} {
		if _, ok := p.specOf(pod(tc.ip, tc.ep)); ok != tc.ok {
			t.Errorf("pod %s with %s: registered %v, want %v", tc.ip, tc.ep, ok, tc.ok)
		}
	}
}

// TestFileOutranksAPI: a worker ID registered over the API and then
// listed by the workers file never breaks the file's reload: the file is
// the operator's configuration and takes the ID (the API's entry goes);
// in the other order the PUT is refused with ErrOtherSource (409).
func TestFileOutranksAPI(t *testing.T) {
	hint := []string{dispatch.CapabilityRouterHint}
	// API first, then the file.
	r := NewRegistry(&fakeDelivery{})
	if err := r.Set(SourceAPI, WorkerSpec{ID: "w1", Capabilities: hint}); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "w2"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Replace(SourceFile, []WorkerSpec{{ID: "w1"}, {ID: "f"}}); err != nil {
		t.Fatalf("file reload listing an API worker's ID: %v; want the file to take it", err)
	}
	if w, _ := r.Get("w1"); w.Source != SourceFile || w.Capable {
		t.Errorf("w1 after the reload: source %s capable %v, want the file's entry", w.Source, w.Capable)
	}
	if w, ok := r.Get("w2"); !ok || w.Source != SourceAPI {
		t.Errorf("w2, an API worker the file does not list, is gone or moved: %+v", w)
	}
	// Reloads keep working, and the API cannot take the ID back.
	if err := r.Replace(SourceFile, []WorkerSpec{{ID: "w1"}}); err != nil {
		t.Fatalf("second reload: %v", err)
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "w1"}); !errors.Is(err, ErrOtherSource) {
		t.Errorf("PUT of the file's w1: %v, want ErrOtherSource (409)", err)
	}
	// Once the file drops the ID, the API may register it.
	if err := r.Replace(SourceFile, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "w1"}); err != nil {
		t.Errorf("PUT once the file no longer lists w1: %v", err)
	}
}
