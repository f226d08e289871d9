package ops_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/ops"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

const policyFile = "worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}]\n"

// do sends method to url over loopback and returns the status, the Allow
// header and the body.
func do(t *testing.T, method, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Allow"), string(body)
}

// TestReadiness pins /readyz's three answers: not ready without a config,
// not ready while the extra check fails (with its reason), and ready with
// the hash of the config in force; /healthz answers throughout.
func TestReadiness(t *testing.T) {
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog()})
	var readyErr error = errors.New("pod informer has not synced")
	srv := httptest.NewServer(ops.Handler(ops.NewRegistry(), d, func() error { return readyErr }))
	t.Cleanup(srv.Close)

	check := func(step, path string, wantStatus int, wantBody string) {
		t.Helper()
		status, _, body := do(t, http.MethodGet, srv.URL+path)
		if status != wantStatus || body != wantBody {
			t.Errorf("%s: GET %s = %d %q, want %d %q", step, path, status, body, wantStatus, wantBody)
		}
	}
	check("no config", "/healthz", 200, "ok\n")
	check("no config", "/readyz", 503, "not ready: "+dispatch.ErrNotReady.Error()+"\n")

	if err := d.Load([]byte(policyFile), "test"); err != nil {
		t.Fatal(err)
	}
	hash := d.ConfigHash()
	if hash == "" {
		t.Fatal("the dispatcher has a config but no hash")
	}
	check("config, informer not synced", "/readyz", 503, "not ready: pod informer has not synced\n")
	check("config, informer not synced", "/healthz", 200, "ok\n")

	readyErr = nil
	check("ready", "/readyz", 200, "ok: config "+hash+"\n")

	// Without an extra check, a config is enough.
	srv2 := httptest.NewServer(ops.Handler(ops.NewRegistry(), d, nil))
	t.Cleanup(srv2.Close)
	status, _, body := do(t, http.MethodGet, srv2.URL+"/readyz")
	if status != 200 || body != "ok: config "+hash+"\n" {
		t.Errorf("no ready func: GET /readyz = %d %q, want 200 for config %s", status, body, hash)
	}
}

// TestRoutes pins what the ops listener serves and refuses: its three
// routes answer GET (and HEAD), another method gets 405 naming the ones
// allowed, and any other path is a 404 — pprof is not on this listener.
func TestRoutes(t *testing.T) {
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog()})
	srv := httptest.NewServer(ops.Handler(ops.NewRegistry(), d, nil))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		method, path string
		wantStatus   int
		wantAllow    string
	}{
		{http.MethodGet, "/healthz", 200, ""},
		{http.MethodHead, "/healthz", 200, ""},
		{http.MethodGet, "/metrics", 200, ""},
		{http.MethodPost, "/healthz", 405, "GET, HEAD"},
		{http.MethodPost, "/readyz", 405, "GET, HEAD"},
		{http.MethodDelete, "/metrics", 405, "GET, HEAD"},
		{http.MethodGet, "/", 404, ""},
		{http.MethodGet, "/debug/pprof/", 404, ""},
		{http.MethodGet, "/healthz/extra", 404, ""},
	} {
		status, allow, _ := do(t, tc.method, srv.URL+tc.path)
		if status != tc.wantStatus || allow != tc.wantAllow {
			t.Errorf("%s %s = %d (Allow %q), want %d (Allow %q)", tc.method, tc.path, status, allow, tc.wantStatus, tc.wantAllow)
		}
	}
}

// TestMetricsFromItsOwnRegistry pins that /metrics serves the registry it
// is given, with the Go and process collectors NewRegistry adds, and
// nothing of another sidecar's registry in the same process.
func TestMetricsFromItsOwnRegistry(t *testing.T) {
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog()})
	mine, other := ops.NewRegistry(), ops.NewRegistry()
	// The same name in both: each sidecar has its own, so neither panics.
	for i, reg := range []*prometheus.Registry{mine, other} {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kvhint_test_room_total", Help: "A room's counter.", ConstLabels: prometheus.Labels{"registry": []string{"mine", "other"}[i]}})
		reg.MustRegister(c)
		c.Add(float64(i + 2))
	}
	srv := httptest.NewServer(ops.Handler(mine, d, nil))
	t.Cleanup(srv.Close)
	status, _, body := do(t, http.MethodGet, srv.URL+"/metrics")
	if status != 200 {
		t.Fatalf("GET /metrics = %d: %s", status, body)
	}
	for _, want := range []string{`kvhint_test_room_total{registry="mine"} 2`, "go_goroutines ", "process_cpu_seconds_total "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `registry="other"`) {
		t.Errorf("/metrics serves another registry's series")
	}
}

// TestPprof pins the profiles the loopback pprof listener serves.
func TestPprof(t *testing.T) {
	srv := httptest.NewServer(ops.PprofHandler())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		path, want string
	}{
		{"/debug/pprof/", "heap"},
		{"/debug/pprof/heap?debug=1", "heap profile:"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile:"},
		{"/debug/pprof/cmdline", "ops.test"},
	} {
		status, _, body := do(t, http.MethodGet, srv.URL+tc.path)
		if status != 200 || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d, body without %q: %.200s", tc.path, status, tc.want, body)
		}
	}
	// The ops routes are not on the pprof listener.
	if status, _, _ := do(t, http.MethodGet, srv.URL+"/metrics"); status != 404 {
		t.Errorf("GET /metrics on the pprof listener = %d, want 404", status)
	}
}
