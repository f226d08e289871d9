package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar"
	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
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

			// Sessions of two turns: a second turn booked on the other
			// prefill worker commits a copy of the first's prompt, and a
			// decode booking of a final turn evicts.
			const n = 40
			finalsOnD0 := int64(0)
			for i := range n {
				ses, turn := i/2, 1+i%2
				prompt := fmt.Sprintf("session %d ", ses) + strings.Repeat("word ", 100*turn)
				req, _ := http.NewRequest(http.MethodPost, f.URL+"/v1/completions",
					strings.NewReader(`{"model":"llama","prompt":"`+prompt+`","max_tokens":4}`))
				req.Header.Set("X-Session-Id", fmt.Sprint("s", ses))
				req.Header.Set("X-Session-Turn", fmt.Sprint(turn))
				req.Header.Set("X-Session-Final", fmt.Sprint(turn == 2))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("X-Worker"), "d") {
					t.Fatalf("status %d from %q: %s", resp.StatusCode, resp.Header.Get("X-Worker"), body)
				}
				if turn == 2 && resp.Header.Get("X-Worker") == "d0" {
					finalsOnD0++
				}
			}

			got := f.Totals()
			got.LastError = ""
			// Each request: a prefill booking, with a kv.fetch when it
			// commits a copy, and a decode booking that evicts on d0 at a
			// final turn and answers nothing for d1. The booking server
			// answers no config hash: no outcome is reported.
			d0 := int(servers["d0"].InBandAccepted())
			want := BookingTotals{Requests: n, Bookings: 2 * n, Hints: got.Copies + d0, Actions: got.Copies + d0, Copies: got.Copies}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
			if got.Copies == 0 || got.Copies > n/2 {
				t.Errorf("%d copies committed, want some and at most one per second turn (%d)", got.Copies, n/2)
			}
			if p := servers["p0"].InBandAccepted() + servers["p1"].InBandAccepted(); p != int64(got.Copies) {
				t.Errorf("prefill workers took %d hints, want one per copy (%d)", p, got.Copies)
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
				if w.ID == "d0" && s.InBandAccepted() != finalsOnD0 {
					t.Errorf("%s: %d hints, want one on each final turn it served (%d)", w.ID, s.InBandAccepted(), finalsOnD0)
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

// blocks is a prompt of n whole KV blocks, the first from of them its
// session's: a turn's prompt is the last turn's and blocks more.
func blocks(session string, n int) string {
	var b strings.Builder
	for i := range n {
		blk := fmt.Sprintf("%s b%d ", session, i)
		b.WriteString(blk + strings.Repeat("x", blockSize*simworker.BytesPerToken-len(blk)))
	}
	return b.String()
}

// startRealSidecar runs a standalone kvhint sidecar on loopback with the
// hints config, and registers the workers with it.
func startRealSidecar(t *testing.T, config string, workers []*Worker, servers map[string]*simworker.Server) *sidecar.Sidecar {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hints.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.New(sidecar.Options{Catalog: builtin.NewCatalog(), ConfigFile: path, Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0",
		AllowLoopbackHintEndpoints: true, PolicyDeadline: 10 * time.Second, Log: sidecartest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	testenv.Eventually(t, 10*time.Second, "the sidecar ready", func(context.Context) error {
		if !s.Dispatcher.Ready() {
			return errors.New("not ready")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range workers {
		if err := simworker.Register(ctx, "http://"+s.BookingAddr(), w.ID, servers[w.ID].HintEndpoint(), w.Component); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestFrontRouterOutcomes runs sessions through a front router, a real
// sidecar and simulated workers with prefix caches, and reads back the
// outcomes the router reported. Planted: each session's turns grow by
// whole blocks (5, then 8, then 12), so a turn served where the session's
// last turn was, or where a kv.fetch brought that turn's blocks, has
// exactly the last turn's blocks cached: 0, 80, then 128 tokens. With a
// config that fetches no copy, a turn moved to the other prefill worker
// finds nothing cached there, and the prefill hit ratio falls.
func TestFrontRouterOutcomes(t *testing.T) {
	// The same router without kv-fetch: a kvcr selection must send its
	// copies, so prefill selects as decode does and sends no hint.
	noFetch := `
worker_selection:
  prefill:
    type: dynamo-default-cost-fn
    hints: []
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-evict
`
	const sessions = 12
	turns := []int{5, 8, 12}
	wantCached := map[int64]int64{5 * blockSize: 0, 8 * blockSize: 5 * blockSize, 12 * blockSize: 8 * blockSize}
	ratio := map[string]float64{}
	for _, tc := range []struct {
		name, config string
	}{{"kv-fetch", testHints}, {"no kv-fetch", noFetch}} {
		t.Run(tc.name, func(t *testing.T) {
			workers, servers := startWorkers(t,
				Worker{ID: "p0", Component: "prefill", RouterHint: true},
				Worker{ID: "p1", Component: "prefill", RouterHint: true},
				Worker{ID: "d0", Component: "decode", RouterHint: true},
			)
			sc := startRealSidecar(t, tc.config, workers, servers)
			f, err := startFrontRouter("llama", []frontRole{
				{name: "prefill", workers: workers[:2], copyRate: 1},
				{name: "decode", workers: workers[2:]},
			}, &Sidecar{Router: "llama", BookingURL: "http://" + sc.BookingAddr()}, dispatch.InBandKVHint)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })

			for turn, n := range turns {
				for ses := range sessions {
					req, _ := http.NewRequest(http.MethodPost, f.URL+"/v1/completions",
						strings.NewReader(`{"model":"llama","prompt":"`+blocks(fmt.Sprint("s", ses), n)+`"}`))
					req.Header.Set("X-Session-Id", fmt.Sprint("s", ses))
					req.Header.Set("X-Session-Turn", fmt.Sprint(turn+1))
					req.Header.Set("X-Session-Final", fmt.Sprint(turn == len(turns)-1))
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("turn %d of s%d: %d %s", turn+1, ses, resp.StatusCode, body)
					}
				}
			}
			requests := sessions * len(turns)
			tot := f.Totals()
			if tot.Outcomes != 2*requests || tot.OutcomeErrors != 0 {
				t.Fatalf("totals %+v: want %d outcomes reported, none refused", tot, 2*requests)
			}
			got := sc.Outcomes.Since(0)
			co := got[sc.Dispatcher.ConfigHash()]
			if len(got) != 1 || co == nil || len(co.Samples) != 2*requests {
				t.Fatalf("outcomes held: %d configs; want %d samples under the sidecar's config %s", len(got), 2*requests, sc.Dispatcher.ConfigHash())
			}
			var cached, prompt, engine int64
			for _, w := range servers {
				engine += w.CachedTokens()
			}
			for _, smp := range co.Samples {
				want, ok := wantCached[smp.Prompt]
				switch {
				case !ok:
					t.Errorf("a sample of %d prompt tokens, not a turn's", smp.Prompt)
				case smp.Role == "decode" || tc.config == testHints:
					// d0 served every turn; a moved prefill turn
					// fetched the last one's blocks.
					if smp.Cached != want {
						t.Errorf("%s turn of %d tokens: %d cached, want %d", smp.Role, smp.Prompt, smp.Cached, want)
					}
				case smp.Cached != want && smp.Cached != 0 && !(smp.Prompt == 12*blockSize && smp.Cached == 5*blockSize):
					// Without a fetch: the last turn's blocks where it
					// was served, none on the other worker, or turn 1's
					// where turn 1 was.
					t.Errorf("prefill turn of %d tokens without a fetch: %d cached", smp.Prompt, smp.Cached)
				}
				if smp.TTFTMicros <= 0 || smp.Error {
					t.Errorf("sample %+v: want a TTFT and no error", smp)
				}
				if smp.Role == "prefill" {
					cached += smp.Cached
					prompt += smp.Prompt
				}
			}
			// Each outcome names its session: a prefill and a decode
			// outcome for each of a session's turns.
			perSession := map[uint64]int{}
			for _, smp := range co.Samples {
				perSession[smp.Session]++
			}
			for ses := range sessions {
				if n := perSession[rolloutapi.SessionKey(fmt.Sprint("s", ses))]; n != 2*len(turns) {
					t.Errorf("session s%d: %d outcomes carry its key, want %d", ses, n, 2*len(turns))
				}
			}
			var all int64
			for _, smp := range co.Samples {
				all += smp.Cached
			}
			if all != engine {
				t.Errorf("outcomes report %d cached tokens, the workers served %d from their caches", all, engine)
			}
			ratio[tc.name] = float64(cached) / float64(prompt)
			t.Logf("%s: prefill prefix-hit ratio %.3f (%d of %d tokens), %d copies committed", tc.name, ratio[tc.name], cached, prompt, tot.Copies)

			// A decode worker that is gone: the request fails, and its
			// outcome says so.
			servers["d0"].Close()
			resp, err := http.Post(f.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"`+blocks("late", 2)+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			last := sc.Outcomes.Since(0)[sc.Dispatcher.ConfigHash()].Samples
			if resp.StatusCode != http.StatusBadGateway || !last[len(last)-1].Error || last[len(last)-1].Role != "decode" || last[len(last)-1].Session != 0 {
				t.Errorf("a request to a gone worker: %d, last outcome %+v; want 502 and a decode error, outside a session", resp.StatusCode, last[len(last)-1])
			}
		})
	}
	if ratio["kv-fetch"] <= ratio["no kv-fetch"] {
		t.Errorf("prefill prefix-hit ratio %.3f with kv-fetch, %.3f without: want it higher with", ratio["kv-fetch"], ratio["no kv-fetch"])
	}
}
