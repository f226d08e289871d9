package devcli

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	core "github.com/kvrouter/kv-hint-operator/pkg/router"
)

func TestStandInRoles(t *testing.T) {
	for _, tc := range []struct {
		flags   []string
		want    string // role:id,id;...
		wantErr string
	}{
		{nil, "", ""},
		{[]string{"decode/d0=http://127.0.0.1:1,router_hint", "prefill/p0=http://127.0.0.1:2", "decode/d1=http://127.0.0.1:3/"}, "prefill:p0;decode:d0,d1", ""},
		{[]string{"decode=http://x"}, "", "want ROLE/ID=URL"},
		{[]string{"encode/e0=http://x"}, "", `role "encode" is neither prefill nor decode`},
		{[]string{"decode/d0="}, "", "want ROLE/ID=URL"},
	} {
		roles, err := standInRoles("llama", tc.flags)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("standInRoles(%q): error %v, want one containing %q", tc.flags, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("standInRoles(%q): %v", tc.flags, err)
		}
		var parts []string
		for _, r := range roles {
			var ids []string
			for _, w := range r.Workers {
				ids = append(ids, w.ID)
			}
			parts = append(parts, r.Name+":"+strings.Join(ids, ","))
		}
		if got := strings.Join(parts, ";"); got != tc.want {
			t.Errorf("standInRoles(%q) = %q, want %q", tc.flags, got, tc.want)
		}
	}
}

// TestStandInRouterBooksThroughTheSidecar: a completion request to the
// stand-in router is booked at the booking API it was given and then
// forwarded to the booked worker; with no workers it answers 503.
func TestStandInRouterBooksThroughTheSidecar(t *testing.T) {
	var mu sync.Mutex
	var bookings []map[string]any
	sidecar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/bookings" {
			http.NotFound(w, r)
			return
		}
		var b map[string]any
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		bookings = append(bookings, b)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent) // no hint for this booking
	}))
	defer sidecar.Close()
	var got []string
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+string(body))
		mu.Unlock()
		w.Write([]byte(`{"choices":[{"text":"ok"}]}`))
	}))
	defer worker.Close()

	roles, err := standInRoles("llama", []string{"decode/d0=" + worker.URL})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := devenv.ServeStandInRouter(ln, "llama", sidecar.URL, roles, core.InBandKVHint)
	defer f.Close()
	resp, err := http.Post(f.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello there"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Worker") != "d0" {
		t.Fatalf("completion: %s, worker %q; want 200 from d0", resp.Status, resp.Header.Get("X-Worker"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bookings) != 1 || bookings[0]["role"] != "decode" || bookings[0]["worker"] != "d0" {
		t.Errorf("bookings %v; want one for role decode, worker d0", bookings)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "/v1/completions ") || !strings.Contains(got[0], "hello there") {
		t.Errorf("worker received %q; want the completion request", got)
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	empty := devenv.ServeStandInRouter(ln2, "llama", sidecar.URL, nil, core.InBandKVHint)
	defer empty.Close()
	resp, err = http.Post(empty.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a router with no workers answered %s; want 503", resp.Status)
	}
	resp, err = http.Get(empty.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s; want 200", resp.Status)
	}
}
