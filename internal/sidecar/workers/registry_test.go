package workers

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

func TestPodWorkerSpec(t *testing.T) {
	now := metav1.Now()
	pod := func(phase corev1.PodPhase, ip string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: ann},
			Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
		}
	}
	full := map[string]string{
		wellknown.CapabilitiesAnnotation: " router_hint , kv_events ", wellknown.HintEndpointAnnotation: "http://10.0.0.5:8081/v1/hints", wellknown.WorkerTypeAnnotation: "decode",
	}
	relative := map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: ":8081/v1/hints"}
	deleting := pod(corev1.PodRunning, "10.0.0.5", full)
	deleting.DeletionTimestamp = &now
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want WorkerSpec
		ok   bool
	}{
		{"absolute endpoint", pod(corev1.PodRunning, "10.0.0.5", full),
			WorkerSpec{ID: "decode-0", Capabilities: []string{"router_hint", "kv_events"}, HintEndpoint: "http://10.0.0.5:8081/v1/hints", WorkerType: "decode"}, true},
		{"endpoint relative to the pod IP", pod(corev1.PodRunning, "10.0.0.6", relative),
			WorkerSpec{ID: "decode-0", Capabilities: []string{"router_hint"}, HintEndpoint: "http://10.0.0.6:8081/v1/hints"}, true},
		{"IPv6 pod IP", pod(corev1.PodRunning, "fd00::6", relative),
			WorkerSpec{ID: "decode-0", Capabilities: []string{"router_hint"}, HintEndpoint: "http://[fd00::6]:8081/v1/hints"}, true},
		{"relative endpoint before the pod has an IP", pod(corev1.PodPending, "", relative), WorkerSpec{}, false},
		{"no annotations: registered, not hint-capable", pod(corev1.PodRunning, "10.0.0.5", nil), WorkerSpec{ID: "decode-0"}, true},
		{"being deleted", deleting, WorkerSpec{}, false},
		{"finished", pod(corev1.PodSucceeded, "10.0.0.5", full), WorkerSpec{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := PodWorkerSpec(tc.pod, true)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRegistryQueues: a worker keeps its queue while its endpoint stays, and
// gets a new one when it moves; sources replace only their own workers.
func TestRegistryQueues(t *testing.T) {
	del := &fakeDelivery{}
	_ = t
	r := NewRegistry(del)
	capable := func(id, ep string) WorkerSpec {
		return WorkerSpec{ID: id, Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: ep}
	}
	if err := r.Set(SourceAPI, capable("a", "http://127.0.0.1:1/h")); err != nil {
		t.Fatal(err)
	}
	q1 := r.lookup("a").q
	if q1 == nil {
		t.Fatal("a hint-capable worker with an endpoint has no queue")
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "a", Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: "http://127.0.0.1:1/h", WorkerType: "decode"}); err != nil {
		t.Fatal(err)
	}
	if r.lookup("a").q != q1 {
		t.Error("an update that keeps the endpoint replaced the queue")
	}
	if err := r.Set(SourceAPI, capable("a", "http://127.0.0.1:2/h")); err != nil {
		t.Fatal(err)
	}
	if q := r.lookup("a").q; q == q1 || q == nil {
		t.Error("a new endpoint kept the old queue")
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "plain"}); err != nil {
		t.Fatal(err)
	}
	if r.lookup("plain").q != nil {
		t.Error("a worker without router_hint got a queue")
	}

	if err := r.Replace(SourceFile, []WorkerSpec{capable("f1", "http://127.0.0.1:3/h"), capable("f2", "http://127.0.0.1:3/h")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Replace(SourceFile, []WorkerSpec{capable("f2", "http://127.0.0.1:3/h")}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range r.List() {
		ids = append(ids, w.Source+"/"+w.ID)
	}
	if diff := cmp.Diff([]string{"api/a", "file/f2", "api/plain"}, ids); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if err := r.Replace(SourceFile, []WorkerSpec{capable("x", "http://h/"), capable("x", "http://h/")}); err == nil {
		t.Error("a duplicate worker was accepted")
	}
}

// TestWorkersFile loads standalone workers from a file and follows its
// changes.
func TestWorkersFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.yaml")
	writeFile(t, path, "workers:\n  - {id: w1, capabilities: [router_hint], hint_endpoint: 'http://127.0.0.1:1/v1/hints'}\n  - {id: w2}\n")
	r := NewRegistry(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); (&FileSource{Path: path, Poll: time.Hour}).Run(ctx, r, testLogger(t)) }()
	t.Cleanup(func() { cancel(); <-done })

	ids := func() string {
		s := ""
		for _, w := range r.List() {
			s += fmt.Sprintf("%s:%v ", w.ID, w.Capable)
		}
		return s
	}
	want := func(s string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, "the registry's workers", func(context.Context) error {
			if got := ids(); got != s {
				return fmt.Errorf("workers %q, want %q", got, s)
			}
			return nil
		})
	}
	want("w1:true w2:false ")
	writeFile(t, path, "workers:\n  - {id: w2, capabilities: [router_hint], hint_endpoint: 'http://127.0.0.1:1/v1/hints'}\n")
	want("w2:true ")

	if _, err := ParseWorkersFile([]byte("workers:\n  - {id: w3, colour: blue}\n")); err == nil {
		t.Error("an unknown key was accepted")
	}
	if _, err := ParseWorkersFile([]byte("workers:\n  - {hint_endpoint: 'http://x/'}\n")); err == nil {
		t.Error("a worker without id was accepted")
	}
}

// TestPodWatchSelector: the pod watch asks for what every pool requires,
// never narrower than one of them, and never mutates the pools.
func TestPodWatchSelector(t *testing.T) {
	sel := func(s string) labels.Selector { return parseSelector(t, s) }
	for _, tc := range []struct {
		name      string
		pools     map[string]string
		poolsOnly bool
		want      string
	}{
		{"no pools known", nil, false, ""},
		{"a role without a pool", map[string]string{"prefill": "app=llama,component=prefill"}, false, ""},
		{"shared requirement", map[string]string{"prefill": "app=llama,component=prefill", "decode": "app=llama,component=decode"}, true, "app=llama"},
		{"one pool", map[string]string{"decode": "app=llama,component in (decode,aggregated)"}, true, "app=llama,component in (aggregated,decode)"},
		{"nothing shared", map[string]string{"prefill": "app=a", "decode": "app=b"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &PodWorkers{poolsOnly: tc.poolsOnly, pools: map[string]labels.Selector{}}
			before := map[string]string{}
			for role, s := range tc.pools {
				p.pools[role] = sel(s)
				before[role] = p.pools[role].String()
			}
			if got := p.watchSelector().String(); got != tc.want {
				t.Errorf("watch selector %q, want %q", got, tc.want)
			}
			for role, s := range p.pools {
				if s.String() != before[role] {
					t.Errorf("pool %s changed from %q to %q", role, before[role], s.String())
				}
			}
		})
	}
}

// TestParseWorkersFileForms: a workers file is a mapping with a workers
// key or the list itself, as --workers-file's help says. Before, the help
// said "YAML list" and a list was refused with a message about a request
// body.
func TestParseWorkersFileForms(t *testing.T) {
	want := []WorkerSpec{{ID: "decode-0", Capabilities: []string{"router_hint"}}}
	for _, doc := range []string{
		"workers:\n- id: decode-0\n  capabilities: [router_hint]\n",
		"- id: decode-0\n  capabilities: [router_hint]\n",
	} {
		got, err := ParseWorkersFile([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", doc, diff)
		}
	}
	for doc, msg := range map[string]string{
		"just a string\n":       "a workers file holds a mapping with a workers key, or a list of workers",
		"- id: d\n  extra: 1\n": `workers file: unknown field "extra"`,
		"workers: [{id: ''}]\n": "workers[0]:",
	} {
		if _, err := ParseWorkersFile([]byte(doc)); err == nil || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "body") {
			t.Errorf("%q: %v; want an error saying %q, and nothing about a body", doc, err, msg)
		}
	}
}
