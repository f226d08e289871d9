package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestWorkersAPIRefusesCredentials: a registration with a password in its
// endpoint is refused, and the password appears in no answer, no listing
// and no log line.
func TestWorkersAPIRefusesCredentials(t *testing.T) {
	var logs syncBuffer
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) {
		o.Log = funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 1})
	})
	body := `{"capabilities":["router_hint"],"hint_endpoint":"http://admin:s3cret@127.0.0.1:1/v1/hints"}`
	req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/w1", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "credentials") {
		t.Errorf("PUT with credentials: %d %s, want 400 naming credentials", resp.StatusCode, b)
	}
	list := post(t, s, "/v1/workers", "") // wrong method: still must not leak
	_ = list
	resp, err = http.Get("http://" + s.BookingAddr() + "/v1/workers")
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for what, text := range map[string]string{"answer": string(b), "listing": string(lb), "logs": logs.String()} {
		if strings.Contains(text, "s3cret") {
			t.Errorf("the %s show the password:\n%s", what, text)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) WriteString(x string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(x)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWorkerPodsCannotRedirectHints is the report's attack against a real
// API server: worker pods whose annotations point the sidecar at the
// router pod's own loopback (a canary on 127.0.0.1 standing in for a local
// admin port). The pods' IP is 127.0.0.2, so that every post of the test
// stays on loopback. Before the fix the canary received both pods' hints.
func TestWorkerPodsCannotRedirectHints(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "sidecar")
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)

	var canaryConns atomic.Int64
	canary := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			canaryConns.Add(1)
		}
	}}
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go canary.Serve(cln)
	t.Cleanup(func() { canary.Close() })
	canaryPort := cln.Addr().(*net.TCPAddr).Port

	// The honest worker listens on its pod IP.
	w := simworker.New(simworker.Options{ID: "honest"})
	wsrv, err := simworker.Start(w, "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wsrv.Close() })
	_, wport, _ := net.SplitHostPort(strings.TrimPrefix(wsrv.URL, "http://"))

	for name, ep := range map[string]string{
		"honest":      ":" + wport + simworker.HintPath,
		"smuggler":    fmt.Sprintf(":%s@127.0.0.1:%d/latest/meta-data", wport, canaryPort),
		"absolutist":  fmt.Sprintf("http://127.0.0.1:%d/latest/meta-data", canaryPort),
		"credentials": fmt.Sprintf("http://admin:s3cret@127.0.0.1:%d/", canaryPort),
	} {
		p := testPod(name, map[string]string{"app": "ssrf"}, map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: ep})
		created, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.2", PodIPs: []corev1.PodIP{{IP: "127.0.0.2"}}}
		if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var logs syncBuffer
	s := startSidecarWithConfig(t, testCatalog(t), roleConfig("ssrf"), func(o *Options) {
		o.WorkerPods, o.Kube, o.Namespace = true, kc, ns
		o.WorkerSelector = labels.SelectorFromSet(labels.Set{"app": "ssrf"})
		o.Log = funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
	})
	testenv.Eventually(t, 10*time.Second, "the pod informer synced", func(context.Context) error { return s.pods.Synced() })
	testenv.Eventually(t, 10*time.Second, "the honest worker registered", func(context.Context) error {
		if _, ok := s.Workers.Get("honest"); !ok {
			return fmt.Errorf("the honest worker is not registered")
		}
		return nil
	})
	for _, id := range []string{"honest", "smuggler", "absolutist", "credentials"} {
		post(t, s, "/v1/bookings", bookingJSON("ssrf-"+id, "decode", id, ""))
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := w.WaitForHints(wctx, 1); err != nil {
		t.Fatalf("the honest worker got no hint: %v", err)
	}
	// Let the sender goroutines run the other posts, had they been queued.
	if err := s.Delivery.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := canaryConns.Load(); n != 0 {
		t.Errorf("worker pod annotations made the sidecar connect %d times to the router pod's loopback", n)
	}
	for _, id := range []string{"smuggler", "absolutist", "credentials"} {
		if wk, ok := s.Workers.Get(id); ok {
			t.Errorf("worker %s registered with endpoint %q", id, wk.HintEndpoint)
		}
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the logs show the password:\n%s", logs.String())
	}
}
