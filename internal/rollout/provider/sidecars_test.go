package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

const (
	stableHash    = "00000000000000aa"
	candidateHash = "00000000000000bb"
)

// routerPod is a running router pod whose sidecar's ops port is port;
// asInit puts the sidecar among the init containers (a native sidecar).
func routerPod(name, ip string, port int32, asInit bool) corev1.Pod {
	sidecar := corev1.Container{Name: "kvhint", Ports: []corev1.ContainerPort{
		{Name: "kvhint-book", ContainerPort: 8790},
		{Name: OpsPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP},
	}}
	router := corev1.Container{Name: "router", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{router}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	if asInit {
		p.Spec.InitContainers = []corev1.Container{sidecar}
	} else {
		p.Spec.Containers = append(p.Spec.Containers, sidecar)
	}
	return p
}

// sidecar is a real HTTP server on loopback serving a pod's outcomes the
// way the sidecar's ops route does: samples at or after ?since=.
type sidecar struct {
	srv  *httptest.Server
	hits atomic.Int64
	port int32
}

func newSidecar(t *testing.T, o rolloutapi.Outcomes) *sidecar {
	t.Helper()
	s := &sidecar{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.URL.Path != rolloutapi.OutcomesPath || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		since, err := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		if err != nil {
			http.Error(w, "since: "+err.Error(), http.StatusBadRequest)
			return
		}
		answer := rolloutapi.Outcomes{Pod: o.Pod, Configs: map[string]*rolloutapi.ConfigOutcomes{}, Shadow: o.Shadow}
		for h, c := range o.Configs {
			kept := &rolloutapi.ConfigOutcomes{Samples: []rolloutapi.Sample{}, Dropped: c.Dropped}
			for _, smp := range c.Samples {
				if smp.At >= since {
					kept.Samples = append(kept.Samples, smp)
				}
			}
			answer.Configs[h] = kept
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(s.srv.Close)
	s.port = portOf(t, s.srv.URL)
	return s
}

func portOf(t *testing.T, url string) int32 {
	t.Helper()
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return int32(ap.Port())
}

// samples are n samples from at on, each prompt 100 tokens with cached
// of them, TTFT ttftMs.
func samples(at int64, n int, cached int64, ttftMs int64) []rolloutapi.Sample {
	out := make([]rolloutapi.Sample, n)
	for i := range out {
		out[i] = rolloutapi.Sample{At: at + int64(i), Role: "decode", Prompt: 100, Cached: cached, TTFTMicros: ttftMs * 1000}
	}
	return out
}

// countDials makes s count the connections it opens.
func countDials(s *Sidecars) *atomic.Int64 {
	var n atomic.Int64
	tr := s.client.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return dial(ctx, network, addr)
	}
	return &n
}

func TestMeasureFromSidecars(t *testing.T) {
	since := time.UnixMilli(1_000_000)
	a := newSidecar(t, rolloutapi.Outcomes{Pod: "router-a", Configs: map[string]*rolloutapi.ConfigOutcomes{
		// 10 samples before the window, 150 in it.
		stableHash:    {Samples: append(samples(999_990, 10, 0, 1), samples(1_000_000, 150, 60, 100)...), Dropped: 3},
		candidateHash: {Samples: samples(1_000_000, 150, 40, 120)},
	}, Shadow: map[string]*rolloutapi.ShadowCounts{candidateHash: {Bookings: 10, Differ: 2}}})
	b := newSidecar(t, rolloutapi.Outcomes{Pod: "router-b", Configs: map[string]*rolloutapi.ConfigOutcomes{
		stableHash:    {Samples: samples(1_000_500, 50, 60, 100)},
		candidateHash: {Samples: samples(1_000_500, 50, 40, 120)},
	}, Shadow: map[string]*rolloutapi.ShadowCounts{candidateHash: {Bookings: 5, Differ: 1}}})
	// A server a pod's annotation names: the provider must never ask it.
	decoy := newSidecar(t, rolloutapi.Outcomes{Pod: "router-a", Configs: map[string]*rolloutapi.ConfigOutcomes{}})

	podA := routerPod("router-a", "127.0.0.1", a.port, false)
	podA.Annotations = map[string]string{"hints.kvrouter.io/ops-address": decoy.srv.URL, rolloutapi.ConfigStatusAnnotation: `{"assigned":"` + stableHash + `"}`}
	podB := routerPod("router-b", "127.0.0.1", b.port, true)
	pending := routerPod("router-c", "", 8791, false)
	pending.Status.Phase = corev1.PodPending
	terminating := routerPod("router-d", "127.0.0.1", a.port, false)
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	// A running pod whose sidecar is down: nothing listens on its port.
	closed := httptest.NewServer(http.NotFoundHandler())
	closedPort := portOf(t, closed.URL)
	closed.Close()
	down := routerPod("router-e", "127.0.0.1", closedPort, false)

	p := NewSidecars(SidecarOptions{AllowLoopback: true, Timeout: 5 * time.Second})
	m, err := p.Measure(context.Background(), Query{Namespace: "inference", Router: "llama",
		Pods: []corev1.Pod{podA, podB, pending, terminating, down}, Stable: stableHash, Candidate: candidateHash, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if decoy.hits.Load() != 0 {
		t.Errorf("the address in the annotation was asked %d times", decoy.hits.Load())
	}
	if a.hits.Load() != 1 || b.hits.Load() != 1 {
		t.Errorf("hits a %d b %d, want 1 each (the terminating pod is not asked)", a.hits.Load(), b.hits.Load())
	}
	if got := m.Sources[4].Error; !strings.Contains(got, "connection refused") {
		t.Errorf("down pod's error %q", got)
	}
	m.Sources[4].Error = "(checked)"
	wantSources := []Source{
		{Name: "router-a", Address: "127.0.0.1:" + strconv.Itoa(int(a.port))},
		{Name: "router-b", Address: "127.0.0.1:" + strconv.Itoa(int(b.port))},
		{Name: "router-c", Skipped: "Pending, not Running"},
		{Name: "router-d", Skipped: "terminating"},
		{Name: "router-e", Address: "127.0.0.1:" + strconv.Itoa(int(closedPort)), Error: "(checked)"},
	}
	if d := cmp.Diff(wantSources, m.Sources); d != "" {
		t.Errorf("sources (-want +got)\n%s", d)
	}
	if d := cmp.Diff([]string{"router-e"}, m.Input.Unanswered); d != "" {
		t.Errorf("unanswered (-want +got)\n%s", d)
	}
	base, canary := m.Input.Baseline.Summarize(), m.Input.Canary.Summarize()
	if base.Requests != 200 || canary.Requests != 200 || base.PrefixHitRatio != 0.6 || canary.PrefixHitRatio != 0.4 || base.Dropped != 3 {
		t.Errorf("baseline %+v canary %+v", base, canary)
	}
	if base.TTFTP90Seconds != 0.1 || canary.TTFTP90Seconds != 0.12 {
		t.Errorf("TTFT p90 %v %v", base.TTFTP90Seconds, canary.TTFTP90Seconds)
	}
	if m.Shadow.Bookings != 15 || m.Shadow.Differ != 3 {
		t.Errorf("shadow %+v", m.Shadow)
	}
	// The pods that answered show harm: Failed despite the pod that did not.
	if v := analysis.Judge(analysis.DefaultThresholds(), m.Input); v.Phase != analysis.Failed || v.Metric != analysis.MetricPrefixHitRatio {
		t.Errorf("verdict %s %s: %s", v.Phase, v.Reason, v.Message)
	}
}

func TestTargetRefusesAtTheCheck(t *testing.T) {
	cases := []struct {
		ip      string
		loop    bool
		want    string // a refusal's text, or the target
		refused bool
	}{
		{ip: "10.244.1.7", want: "10.244.1.7:8791"},
		{ip: "fd00:10:244::7", want: "[fd00:10:244::7]:8791"},
		{ip: "127.0.0.1", loop: true, want: "127.0.0.1:8791"},
		{ip: "::ffff:10.0.0.1", want: "10.0.0.1:8791"},
		{ip: "", want: "has no IP yet"},
		{ip: "router.example", want: "is not an IP address", refused: true},
		{ip: "0.0.0.0", want: "unspecified", refused: true},
		{ip: "::", want: "unspecified", refused: true},
		{ip: "224.0.0.1", want: "multicast", refused: true},
		{ip: "ff02::1", want: "multicast", refused: true},
		{ip: "169.254.169.254", want: "link-local", refused: true},
		{ip: "fe80::1", want: "link-local", refused: true},
		{ip: "fe80::1%eth0", want: "zoned", refused: true},
		{ip: "::ffff:169.254.1.1", want: "link-local", refused: true},
		{ip: "255.255.255.255", want: "broadcast", refused: true},
		{ip: "127.0.0.1", want: "loopback", refused: true},
		{ip: "127.3.2.1", want: "loopback", refused: true},
		{ip: "::1", want: "loopback", refused: true},
		{ip: "::ffff:127.0.0.1", want: "loopback", refused: true},
	}
	p := NewSidecars(SidecarOptions{})
	dials := countDials(p)
	for _, c := range cases {
		t.Run(c.ip, func(t *testing.T) {
			pod := routerPod("r", c.ip, 8791, false)
			got, err := Target(&pod, c.loop)
			if err == nil {
				if got.String() != c.want {
					t.Fatalf("target %s, want %s", got, c.want)
				}
				return
			}
			if !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrAddressRefused) != c.refused {
				t.Fatalf("error %q (refused %v), want %q (refused %v)", err, errors.Is(err, ErrAddressRefused), c.want, c.refused)
			}
			// Fetch stops at the check: not one connection is opened.
			if c.loop {
				return
			}
			_, sources := p.Fetch(context.Background(), []corev1.Pod{pod}, time.Now())
			if sources[0].Error == "" || sources[0].Address != "" {
				t.Fatalf("source %+v, want an error and no address", sources[0])
			}
		})
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d connections opened to refused addresses", n)
	}
	// The same check at the socket, for any path around Target.
	for _, addr := range []string{"169.254.169.254:80", "127.0.0.1:8791", "[ff02::1]:80", "0.0.0.0:1", "name:80"} {
		if err := dialControl(false)("tcp", addr, nil); !errors.Is(err, ErrAddressRefused) {
			t.Errorf("dial control let %s through: %v", addr, err)
		}
	}
	if err := dialControl(true)("tcp", "127.0.0.1:8791", nil); err != nil {
		t.Errorf("dial control with loopback allowed: %v", err)
	}
}

func TestTargetPorts(t *testing.T) {
	pod := routerPod("r", "10.0.0.1", 8791, true)
	if got, err := Target(&pod, false); err != nil || got.Port() != 8791 {
		t.Fatalf("init-container sidecar: %v %v", got, err)
	}
	none := routerPod("r", "10.0.0.1", 8791, false)
	none.Spec.Containers[1].Ports[1].Name = "ops"
	if _, err := Target(&none, false); err == nil || !strings.Contains(err.Error(), "no container has a port named kvhint-ops") {
		t.Fatalf("no ops port: %v", err)
	}
	udp := routerPod("r", "10.0.0.1", 8791, false)
	udp.Spec.Containers[1].Ports[1].Protocol = corev1.ProtocolUDP
	if _, err := Target(&udp, false); !errors.Is(err, ErrAddressRefused) {
		t.Fatalf("UDP ops port: %v", err)
	}
	zero := routerPod("r", "10.0.0.1", 0, false)
	if _, err := Target(&zero, false); !errors.Is(err, ErrAddressRefused) {
		t.Fatalf("port 0: %v", err)
	}
}

func TestSidecarAnswersRefused(t *testing.T) {
	serve := func(h http.HandlerFunc) corev1.Pod {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return routerPod("router-a", "127.0.0.1", portOf(t, srv.URL), false)
	}
	var redirected atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { redirected.Add(1) }))
	t.Cleanup(elsewhere.Close)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	cases := []struct {
		name string
		h    http.HandlerFunc
		want string // a regular expression
	}{
		{"too large", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"configs":{},"pod":"` + strings.Repeat("x", 2048) + `"}`))
		}, "the answer exceeds 1024 bytes"},
		{"not 200", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "outcomes are off", http.StatusServiceUnavailable)
		}, "answered 503 Service Unavailable: outcomes are off"},
		{"a redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+rolloutapi.OutcomesPath, http.StatusFound)
		}, "answered 302 Found"},
		{"not JSON", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }, "the answer is not outcomes"},
		{"another pod", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"pod":"router-z","configs":{}}`))
		}, `answered for pod "router-z"`},
		{"a bad hash", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"configs":{"../etc":{"samples":[]}}}`))
		}, `config "../etc" is not a config hash`},
		{"too slow", func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}, "timeout|deadline exceeded"},
	}
	p := NewSidecars(SidecarOptions{AllowLoopback: true, MaxBodyBytes: 1024, Timeout: 300 * time.Millisecond})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, sources := p.Fetch(context.Background(), []corev1.Pod{serve(c.h)}, time.Now())
			if len(out) != 0 || !regexp.MustCompile(c.want).MatchString(sources[0].Error) {
				t.Fatalf("answers %d, error %q, want %q", len(out), sources[0].Error, c.want)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v with a 300ms timeout", d)
			}
		})
	}
	if redirected.Load() != 0 {
		t.Fatalf("the redirect was followed %d times", redirected.Load())
	}
}

func TestSidecarConcurrencyLimit(t *testing.T) {
	var inflight, peak atomic.Int64
	var mu sync.Mutex
	var pods []corev1.Pod
	for i := range 6 {
		name := "router-" + strconv.Itoa(i)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			n := inflight.Add(1)
			mu.Lock()
			peak.Store(max(peak.Load(), n))
			mu.Unlock()
			time.Sleep(40 * time.Millisecond) // hold the slot so overlaps show
			inflight.Add(-1)
			_, _ = w.Write([]byte(`{"pod":"` + name + `","configs":{}}`))
		}))
		t.Cleanup(srv.Close)
		pods = append(pods, routerPod(name, "127.0.0.1", portOf(t, srv.URL), false))
	}
	p := NewSidecars(SidecarOptions{AllowLoopback: true, Concurrency: 2})
	out, sources := p.Fetch(context.Background(), pods, time.Now())
	if len(out) != 6 {
		t.Fatalf("%d answers: %+v", len(out), sources)
	}
	if got := peak.Load(); got > 2 || got < 1 {
		t.Fatalf("peak concurrency %d, want at most 2", got)
	}
}
