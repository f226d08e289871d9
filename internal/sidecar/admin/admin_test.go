package admin

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
)

// serveAdmin serves the routes on loopback over real HTTP, with reg's
// workers, until the test ends.
func serveAdmin(t *testing.T, reg *workers.Registry, off string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &API{Workers: reg, Log: logr.Discard(), RegistrationOff: off, Book: func(*fasthttp.RequestCtx) {}}
	srv := &fasthttp.Server{Handler: a.Handler(), StreamRequestBody: true}
	go srv.Serve(ln)
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRegistrationRoutes: registration answers only where it is on; IDs
// are checked before anything else; another source's worker is a 409 and
// stays; the API's own worker may be removed.
func TestRegistrationRoutes(t *testing.T) {
	reg := workers.NewRegistry(nil)
	if err := reg.Replace(workers.SourceFile, []workers.WorkerSpec{{ID: "filew"}}); err != nil {
		t.Fatal(err)
	}
	on := serveAdmin(t, reg, "")
	for _, tc := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{http.MethodPut, "/v1/workers/%FF", `{}`, http.StatusBadRequest, "UTF-8"},
		{http.MethodPut, "/v1/workers/a%00b", `{}`, http.StatusBadRequest, "ASCII letters"},
		{http.MethodDelete, "/v1/workers/a%0Ab", "", http.StatusBadRequest, "ASCII letters"},
		{http.MethodPut, "/v1/workers/filew", `{}`, http.StatusConflict, "another source (file)"},
		{http.MethodDelete, "/v1/workers/filew", "", http.StatusConflict, "another source (file)"},
		{http.MethodDelete, "/v1/workers/nobody", "", http.StatusNotFound, "not registered"},
		{http.MethodPut, "/v1/workers/api-0", `{"worker_type":"decode"}`, http.StatusOK, `"source": "api"`},
		{http.MethodDelete, "/v1/workers/api-0", "", http.StatusNoContent, ""},
	} {
		code, body := send(t, tc.method, on+tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, code, body, tc.code, tc.says)
		}
	}
	if w, ok := reg.Get("filew"); !ok || w.Source != workers.SourceFile {
		t.Errorf("the file's worker is %+v, %v after the attempts", w, ok)
	}

	off := serveAdmin(t, reg, "pod mode")
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		if code, body := send(t, method, off+"/v1/workers/filew", `{}`); code != http.StatusForbidden || !strings.Contains(body, "pod mode") {
			t.Errorf("%s with registration off: %d %s, want 403 saying why", method, code, body)
		}
	}
	if code, _ := send(t, http.MethodGet, off+"/v1/workers/filew", ""); code != http.StatusOK {
		t.Errorf("GET with registration off: %d, want 200", code)
	}
}
