package router

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

	"github.com/kvrouter/kv-hint-operator/internal/simworker"
)

// TestHintEndpointValidation: endpoints that carry credentials, or name a
// link-local, metadata, unspecified or multicast address, are refused when
// they are registered; nothing is sent anywhere. The error never repeats a
// password.
func TestHintEndpointValidation(t *testing.T) {
	for _, tc := range []struct {
		ep, why string
	}{
		{"http://127.0.0.1:8081/v1/hints", ""},
		{"https://decode-0.decode.llama.svc:8443/v1/hints", ""},
		{"http://[::1]:8081/v1/hints", ""},
		{"ftp://127.0.0.1/x", "absolute http or https URL"},
		{"/v1/hints", "absolute http or https URL"},
		{"http://user:s3cret@127.0.0.1:8081/v1/hints", "credentials"},
		{"http://user@127.0.0.1:8081/v1/hints", "credentials"},
		{"http://169.254.169.254/latest/meta-data", "link-local"},
		{"http://169.254.169.254:80/latest/meta-data/iam", "link-local"},
		{"http://[fe80::1]:8081/v1/hints", "link-local"},
		{"http://[fd00:ec2::254]/latest/meta-data", "metadata"},
		{"http://100.100.100.200/latest/meta-data", "metadata"},
		{"http://0.0.0.0:8081/v1/hints", "unspecified"},
		{"http://[::]:8081/v1/hints", "unspecified"},
		{"http://224.0.0.1:8081/v1/hints", "multicast"},
		{"http://127.0.0.1:8081/v1/hints?x=1", "query"},
		{"http://127.0.0.1:8081/v1/hints#frag", "fragment"},
	} {
		t.Run(tc.ep, func(t *testing.T) {
			s := WorkerSpec{ID: "w", Capabilities: []string{CapabilityRouterHint}, HintEndpoint: tc.ep}
			err := s.Validate()
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.why != "" && err == nil:
				t.Fatalf("accepted, want refused for %s", tc.why)
			case err != nil && !strings.Contains(err.Error(), tc.why):
				t.Errorf("error %q does not say %q", err, tc.why)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Errorf("error %q repeats the password", err)
			}
		})
	}
}

// TestDialRefusesLinkLocal: a name that resolves to a refused address is
// stopped by the dialer's check before connect; the check is called here
// directly, so no packet leaves.
func TestDialRefusesLinkLocal(t *testing.T) {
	for _, addr := range []string{"169.254.169.254:80", "[fe80::1%lo]:80", "0.0.0.0:80", "[fd00:ec2::254]:80"} {
		if err := checkDialAddress("tcp4", addr, nil); err == nil {
			t.Errorf("dial to %s allowed", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:80", "[::1]:80", "10.0.0.5:8081"} {
		if err := checkDialAddress("tcp", addr, nil); err != nil {
			t.Errorf("dial to %s refused: %v", addr, err)
		}
	}
}

// TestPodHintEndpoint: a worker pod's annotation gives a port and a path on
// the pod's own IP, nothing else. Absolute URLs are refused unless the
// sidecar allows them explicitly.
func TestPodHintEndpoint(t *testing.T) {
	pod := func(ep string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: map[string]string{AnnotationCapabilities: "router_hint", AnnotationHintEndpoint: ep}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.6"},
		}
	}
	for _, tc := range []struct {
		ep            string
		allowAbsolute bool
		want, why     string
	}{
		{":8081/v1/hints", false, "http://10.0.0.6:8081/v1/hints", ""},
		{":8081", false, "http://10.0.0.6:8081/", ""},
		{":8081/", false, "http://10.0.0.6:8081/", ""},
		{":8081/v1/hints%20x", false, "", "path"},
		// The attack of the report: the "port" smuggles userinfo and a host.
		{":80@127.0.0.1:9300/latest/meta-data", false, "", "port"},
		{":80@169.254.169.254/latest/meta-data", false, "", "port"},
		{":0/v1/hints", false, "", "port"},
		{":65536/v1/hints", false, "", "port"},
		{":8081/v1/hints?next=http://127.0.0.1", false, "", "path"},
		{":8081/v1/hints#x", false, "", "path"},
		{":8081\\@127.0.0.1/", false, "", "port"},
		{"http://127.0.0.1:9300/latest/meta-data", false, "", "--allow-absolute-hint-endpoints"},
		{"http://10.0.0.9:8081/v1/hints", false, "", "--allow-absolute-hint-endpoints"},
		{"http://10.0.0.9:8081/v1/hints", true, "http://10.0.0.9:8081/v1/hints", ""},
		{"http://169.254.169.254/latest/meta-data", true, "", "link-local"},
		{"http://u:s3cret@10.0.0.9:8081/v1/hints", true, "", "credentials"},
		{"10.0.0.9:8081/v1/hints", false, "", "port"},
	} {
		t.Run(tc.ep, func(t *testing.T) {
			spec, ok, err := PodWorkerSpec(pod(tc.ep), tc.allowAbsolute)
			if tc.why != "" {
				if err == nil {
					t.Fatalf("accepted as %q, want refused for %s", spec.HintEndpoint, tc.why)
				}
				if !strings.Contains(err.Error(), tc.why) {
					t.Errorf("error %q does not say %q", err, tc.why)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q repeats the password", err)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("refused: ok %v, %v", ok, err)
			}
			if spec.HintEndpoint != tc.want {
				t.Errorf("endpoint %q, want %q", spec.HintEndpoint, tc.want)
			}
		})
	}
}

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
	kc := testKube(t)
	ns := testNamespace(t, kc)
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
		p := testPod(name, map[string]string{"app": "ssrf"}, map[string]string{AnnotationCapabilities: "router_hint", AnnotationHintEndpoint: ep})
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
	eventually(t, 10*time.Second, func() error { return s.pods.Synced() })
	eventually(t, 10*time.Second, func() error {
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
