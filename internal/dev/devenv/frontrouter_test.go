package devenv

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/test/receivers"
)

// testHints is llama's config in config/samples, as a hints YAML: prefill
// sends committed copies, decode evicts at a session's end.
const testHints = `
worker_selection:
  prefill:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv-fetch
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-evict
`

// bookingServer answers POST /v1/bookings as a sidecar does, from a
// dispatcher in the test: 200 with the hint message, or 204.
func bookingServer(t *testing.T, ln net.Listener, capable map[string]bool) {
	t.Helper()
	// The test counts every hint: a policy deadline a loaded machine can
	// overrun would drop one for reasons that are not the front router's.
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: dispatch.StaticWorkers(capable), PolicyDeadline: 10 * time.Second})
	if err := d.Load([]byte(testHints), "hints.yaml"); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/bookings", func(w http.ResponseWriter, r *http.Request) {
		var booking bookingapi.Booking
		if err := json.NewDecoder(r.Body).Decode(&booking); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h, err := d.Build(r.Context(), &booking)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		if h.Message == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(h.Message)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// startWorkers starts simulated workers on loopback, as devenv's Workers,
// and returns them and their servers by ID.
func startWorkers(t *testing.T, specs ...Worker) ([]*Worker, map[string]*simworker.Server) {
	t.Helper()
	var out []*Worker
	servers := map[string]*simworker.Server{}
	for _, spec := range specs {
		s, err := simworker.Start(simworker.New(simworker.Options{ID: spec.ID, WorkerType: spec.Component}), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		w := spec
		w.URL = s.URL
		out = append(out, &w)
		servers[w.ID] = s
	}
	return out, servers
}

// TestFrontRouter: completion requests through a front router are booked
// through the booking API, prefill then decode, and reach the booked
// workers with their hints in-band at the path asked for, beside the
// prefill worker's transfer parameters on the decode hop; the worker
// without router_hint serves requests and gets no hint; over TCP and over
// a Unix socket.
func TestFrontRouter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   dispatch.InBandPath
		socket bool
	}{
		{"kv_hint over TCP", dispatch.InBandKVHint, false},
		{"kv_hints over a Unix socket", dispatch.InBandKVHints, true},
		{"router_hint", dispatch.InBandRouterHint, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			workers, servers := startWorkers(t,
				Worker{ID: "p0", Component: "prefill", RouterHint: true},
				Worker{ID: "p1", Component: "prefill", RouterHint: true},
				Worker{ID: "d0", Component: "decode", RouterHint: true},
				Worker{ID: "d1", Component: "decode"},
			)
			capable := map[string]bool{}
			for _, w := range workers {
				capable[w.ID] = w.RouterHint
			}
			sidecar := &Sidecar{Router: "llama"}
			var ln net.Listener
			var err error
			if tc.socket {
				sock := filepath.Join(t.TempDir(), "booking.sock")
				ln, err = net.Listen("unix", sock)
				sidecar.BookingURL = "unix://" + sock
			} else {
				ln, err = net.Listen("tcp", "127.0.0.1:0")
				if err == nil {
					sidecar.BookingURL = "http://" + ln.Addr().String()
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			bookingServer(t, ln, capable)
			f, err := startFrontRouter("llama", []frontRole{
				{name: "prefill", workers: workers[:2], copyRate: 1},
				{name: "decode", workers: workers[2:]},
			}, sidecar, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })

			// Final turns, so that every decode booking evicts.
			const n = 40
			for i := range n {
				req, _ := http.NewRequest(http.MethodPost, f.URL+"/v1/completions",
					strings.NewReader(`{"model":"llama","prompt":"`+strings.Repeat("word ", 200)+`","max_tokens":4}`))
				req.Header.Set("X-Session-Id", "s"+string(rune('a'+i%26)))
				req.Header.Set("X-Session-Turn", "1")
				req.Header.Set("X-Session-Final", "true")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("X-Worker"), "d") {
					t.Fatalf("status %d from %q: %s", resp.StatusCode, resp.Header.Get("X-Worker"), body)
				}
			}

			got := f.Totals()
			got.LastError = ""
			// Each request: a prefill booking with a kv.fetch, and a decode
			// booking that evicts on d0 and answers nothing for d1.
			d0 := int(servers["d0"].InBandAccepted())
			want := BookingTotals{Requests: n, Bookings: 2 * n, Hints: n + d0, Actions: n + d0}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
			for _, w := range workers {
				s := servers[w.ID]
				if s.InBandRejected() != 0 || s.Accepted() != 0 {
					t.Errorf("%s: %d in-band refused, %d pushed", w.ID, s.InBandRejected(), s.Accepted())
				}
				if s.Requests() == 0 {
					t.Errorf("%s served no request", w.ID)
				}
				if !w.RouterHint {
					if s.InBandAccepted() != 0 {
						t.Errorf("%s does not advertise router_hint but got %d hints", w.ID, s.InBandAccepted())
					}
					continue
				}
				if s.InBandAccepted() != s.Requests() {
					t.Errorf("%s: %d hints on %d requests", w.ID, s.InBandAccepted(), s.Requests())
				}
				for _, h := range s.InBandHints() {
					if h.Path != tc.path.String() {
						t.Errorf("%s: a hint at %s, want %s", w.ID, h.Path, tc.path)
					}
					// Every engine that reads hints takes the hint as
					// kvhint dev's router carried it.
					if _, err := receivers.CheckAll(h.Body); err != nil {
						t.Errorf("%s: %v", w.ID, err)
					}
				}
			}
		})
	}
}

// TestFrontRouterBookingFails: a booking API that cannot be reached fails
// the request with 502 and counts the error; no worker is called.
func TestFrontRouterBookingFails(t *testing.T) {
	workers, servers := startWorkers(t, Worker{ID: "c0", Component: "decode", RouterHint: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	f, err := startFrontRouter("chat", []frontRole{{name: "decode", workers: workers}}, &Sidecar{BookingURL: url}, dispatch.InBandKVHint)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resp, err := http.Post(f.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	if tot := f.Totals(); tot.Errors != 1 || !strings.Contains(tot.LastError, "booking decode") || servers["c0"].Requests() != 0 {
		t.Errorf("totals %+v, worker requests %d", tot, servers["c0"].Requests())
	}
}

// TestDriveRequests: the request stream reaches every front router at
// about its rate and ends with its context.
func TestDriveRequests(t *testing.T) {
	workers, servers := startWorkers(t, Worker{ID: "x0", Component: "decode", RouterHint: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bookingServer(t, ln, map[string]bool{"x0": true})
	f, err := startFrontRouter("chat", []frontRole{{name: "decode", workers: workers}}, &Sidecar{BookingURL: "http://" + ln.Addr().String()}, dispatch.InBandKVHint)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := &Env{Fronts: []*FrontRouter{f}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	traffic := e.DriveRequests(ctx, 50)
	for traffic.Totals()["chat"].Requests < 10 {
		select {
		case <-ctx.Done():
			t.Fatalf("totals %+v after 10 s", traffic.Totals())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if tot := traffic.Totals()["chat"]; tot.Errors != 0 {
		t.Errorf("totals %+v", tot)
	}
	if servers["x0"].InBandRejected() != 0 {
		t.Errorf("%d hints refused", servers["x0"].InBandRejected())
	}
}
