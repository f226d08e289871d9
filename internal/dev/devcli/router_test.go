package devcli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
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
	f := devenv.ServeStandInRouter(ln, "llama", sidecar.URL, roles, dispatch.InBandKVHint)
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
	empty := devenv.ServeStandInRouter(ln2, "llama", sidecar.URL, nil, dispatch.InBandKVHint)
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

// TestRouterCommandAsDeployed runs `kvhint-dev router` with the args the
// shipped manifests give its container, over TCP (config/router) and over
// the Unix socket (config/router-manual's patch), and checks that the hint
// the booking API answers reaches the worker in-band, at the path asked
// for. Only the addresses are rewritten: the socket into a temporary
// directory, the booking port to the test's listener, the serving address
// to loopback.
func TestRouterCommandAsDeployed(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const hint = `{"protocol_version":"0.1","hint_id":"h1","actions":[{"action_id":"a1","type":"kv.retain","version":"1.0","payload":{"ttl_ms":1000}}]}`
	for _, tc := range []struct {
		name, manifest string
		socket         bool
		hintPath       string // --hint-path, empty for the default
		wantAt         []string
	}{
		{"tcp", "config/router/deployment.yaml", false, "", []string{"kv_transfer_params", "kv_hint"}},
		{"unix socket", "config/router-manual/unix-socket-patch.yaml", true, "", []string{"kv_transfer_params", "kv_hint"}},
		{"kv_hints", "config/router/deployment.yaml", false, "kv_hints", []string{"kv_hints"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := routerArgs(t, filepath.Join(root, tc.manifest))
			if len(args) == 0 || args[0] != "router" {
				t.Fatalf("%s: router container args %q do not run the router command", tc.manifest, args)
			}
			var bookings atomic.Int32
			sidecar := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/bookings" {
					http.NotFound(w, r)
					return
				}
				bookings.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(hint))
			}), ReadHeaderTimeout: 5 * time.Second}
			var ln net.Listener
			var err error
			if tc.socket {
				sock := filepath.Join(sidecartest.SocketDir(t), "booking.sock")
				ln, err = net.Listen("unix", sock)
				for i, a := range args {
					args[i] = strings.Replace(a, "unix:///run/kvhint/booking.sock", "unix://"+sock, 1)
				}
			} else {
				ln, err = net.Listen("tcp", "127.0.0.1:0")
				for i, a := range args {
					args[i] = strings.Replace(a, "http://127.0.0.1:8790", "http://"+ln.Addr().String(), 1)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			go sidecar.Serve(ln)
			defer sidecar.Close()

			var got atomic.Pointer[[]byte]
			worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got.Store(&body)
				w.Write([]byte(`{"choices":[{"text":"ok"}]}`))
			}))
			defer worker.Close()

			args = append(args[1:], "--listen=127.0.0.1:0", "--worker=decode/d0="+worker.URL+",router_hint")
			if tc.hintPath != "" {
				args = append(args, "--hint-path="+tc.hintPath)
			}
			url := runRouterCommand(t, args)

			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello there"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("completion with args %q: %s", args, resp.Status)
			}
			if bookings.Load() != 1 {
				t.Fatalf("booking API saw %d bookings; want 1", bookings.Load())
			}
			body := got.Load()
			if body == nil {
				t.Fatal("the worker received no request")
			}
			var req map[string]any
			if err := json.Unmarshal(*body, &req); err != nil {
				t.Fatal(err)
			}
			var at any = req
			for _, k := range tc.wantAt {
				m, _ := at.(map[string]any)
				at = m[k]
			}
			carried, _ := json.Marshal(at)
			var want any
			json.Unmarshal([]byte(hint), &want)
			wantJSON, _ := json.Marshal(want)
			if string(carried) != string(wantJSON) {
				t.Errorf("the worker got %s at %s; want the booking's hint %s\nrequest: %s", carried, strings.Join(tc.wantAt, "."), wantJSON, *body)
			}
		})
	}
}

// runRouterCommand runs the router command with args until the test ends
// and returns the URL it serves at.
func runRouterCommand(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	cmd := newRouterCommand()
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router %q: %v", args, err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, rest, ok := strings.Cut(out.String(), "serving at "); ok {
			if url, _, ok := strings.Cut(rest, ","); ok {
				return url
			}
		}
		select {
		case err := <-done:
			t.Fatalf("router %q exited: %v\n%s", args, err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("router %q did not start serving:\n%s", args, out.String())
	return ""
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// routerArgs is the args of the container named router in the Deployment
// (or Deployment patch) at path.
func routerArgs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.Unmarshal(data, &dep); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == "router" {
			return slices.Clone(c.Args)
		}
	}
	t.Fatalf("%s: no container named router", path)
	return nil
}
