package fault

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestMemoryLimitUnitMistake: the real binary given KVHINT_MEMORY_LIMIT=256
// (what limits.memory 256Mi gives with a resourceFieldRef divisor of 1Mi)
// refuses to start and names the mistake, where it used to run with a
// 179-byte Go memory limit.
func TestMemoryLimitUnitMistake(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hints.yaml")
	writeFile(t, cfg, hintsConfig(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvhint, "sidecar", "--config-file", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	cmd.Env = append(cmd.Environ(), "KVHINT_MEMORY_LIMIT=256", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the sidecar with KVHINT_MEMORY_LIMIT=256: %v (context %v)\n%s", err, ctx.Err(), out)
	}
	if want := "did you mean 256Mi? a resourceFieldRef divisor of 1Mi yields mebibytes"; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestWorkerIDCollision: a PUT of an ID the workers file lists is 409;
// an ID registered over the API that the file then lists is taken over
// by the file, and the file's later reloads go on working, in the real
// binary over loopback.
func TestWorkerIDCollision(t *testing.T) {
	w := startWorker(t, "w")
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("filew", w.HintEndpoint())})
	body := fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, w.HintEndpoint())
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/filew", body); a.code != http.StatusConflict {
		t.Errorf("PUT of the file's worker: %d %s, want 409", a.code, a.body)
	}
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/apiw", body); a.code >= 300 {
		t.Fatalf("PUT apiw: %d %s", a.code, a.body)
	}
	workers := filepath.Join(s.dir, "workers.yaml")
	writeFile(t, workers, "workers:\n"+workerLine("filew", w.HintEndpoint())+workerLine("apiw", w.HintEndpoint()))
	testenv.Eventually(t, 10*time.Second, "the file takes apiw", func(context.Context) error {
		if src := listed(t, s)["apiw"]; src != "file" {
			return fmt.Errorf("apiw's source is %q, want file", src)
		}
		return nil
	})
	writeFile(t, workers, "workers:\n"+workerLine("filew", w.HintEndpoint())+workerLine("apiw", w.HintEndpoint())+workerLine("later", w.HintEndpoint()))
	testenv.Eventually(t, 10*time.Second, "a later reload", func(context.Context) error {
		if src := listed(t, s)["later"]; src != "file" {
			return fmt.Errorf("later's source is %q, want file: the reload did not apply", src)
		}
		return nil
	})
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/apiw", body); a.code != http.StatusConflict {
		t.Errorf("PUT of apiw once the file lists it: %d %s, want 409", a.code, a.body)
	}
	if a := do(t, http.MethodGet, s.ops+"/readyz", ""); a.code != http.StatusOK {
		t.Errorf("/readyz: %d %s", a.code, a.body)
	}
}

// TestSlowSendersDoNotStarveLongBookings: six connections declare 1 MiB
// booking bodies and send 4 KiB of each, then nothing, for the read
// timeout; meanwhile a 47,000-hash booking from another connection is
// answered, not 503. Charged by the declared length the six held 36 MiB
// of the 32 MiB budget and every long booking got 503 until they timed
// out (the report).
func TestSlowSendersDoNotStarveLongBookings(t *testing.T) {
	sink := startSink(t)
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("p0", sink.HintEndpoint())})
	addr := strings.TrimPrefix(s.booking, "http://")
	for i := range 6 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		head := fmt.Sprintf("POST /v1/bookings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<20)
		if _, err := c.Write(append([]byte(head), bytes.Repeat([]byte(" "), 4<<10)...)); err != nil {
			t.Fatalf("slow sender %d: %v", i, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the six bodies charged", func(context.Context) error {
		if v := scrape(t, s.ops)["kvhint_router_booking_memory_bytes"]; v < 6*128<<10 {
			return fmt.Errorf("booking_memory_bytes %v, want the six slow bodies' charge", v)
		}
		return nil
	})
	t.Logf("six slow senders hold %v bytes of the booking budget", scrape(t, s.ops)["kvhint_router_booking_memory_bytes"])
	r := newRouter(s, 1)
	resp, err := r.c.Post(r.url, "application/json", bytes.NewReader(bookingBody("long", "prefill", "p0", 47000)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a 47,000-hash booking beside six slow 1 MiB senders: %d %.200s, want 200", resp.StatusCode, b)
	}
}

// churnCycles is how many add-book-remove cycles TestWorkerChurnBounded
// runs against each kind of endpoint: the 30,000.
const churnCycles = 30000

// TestWorkerChurnBounded: 30,000 cycles, eight at a time, each of which
// registers a new worker over the API, books it (a kv-evict hint, posted to
// the worker) and removes it, against the real binary over loopback: first
// with every worker at one hint endpoint (a worker restarted under a new
// ID), then with each at an endpoint of its own (a path each, on one
// server). Each removed worker used to leave its client's idle-cleaner
// goroutine asleep for 90 s: 29,765 goroutines and 279 MB after 30,000
// cycles in under 60 s. Goroutines and RSS are sampled every 100 ms during
// the churn and read again after it, and must stay within the bounds
// below, whatever the number of cycles.
func TestWorkerChurnBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		// endpoint is the hint endpoint of the worker of cycle i.
		endpoint func(base string, i int) string
		// clients is how many clients that no worker uses may keep a
		// cleaner goroutine: the one endpoint's, or the 1,024 parked and
		// 1,024 dropped clients of endpoints no worker uses.
		clients int
	}{
		{"one endpoint", func(base string, _ int) string { return base + "/v1/hints" }, 1},
		{"an endpoint each", func(base string, i int) string { return fmt.Sprintf("%s/v1/hints/%d", base, i) }, 1024 + 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			posts := startCountingServer(t)
			s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers: []\n", env: []string{memoryLimitEnv}})
			pid := s.proc.PID()
			base := measure(t, pid, s.ops)
			pk := samplePeaks(t, pid, s.ops)
			const conc = 8
			var next, failed atomic.Int64
			var firstErr atomic.Value
			fail := func(err error) {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			start := time.Now()
			var wg sync.WaitGroup
			for range conc {
				r := newRouter(s, 1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := int(next.Add(1)) - 1
						if i >= churnCycles {
							return
						}
						id := fmt.Sprint("c", i)
						if err := r.send(http.MethodPut, "/v1/workers/"+id, fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, tc.endpoint(posts.url, i)), http.StatusOK); err != nil {
							fail(err)
							continue
						}
						if err := r.send(http.MethodPost, "/v1/bookings", string(bookingBody(id, "decode", id, 0)), http.StatusOK); err != nil {
							fail(err)
						}
						if err := r.send(http.MethodDelete, "/v1/workers/"+id, "", http.StatusNoContent); err != nil {
							fail(err)
						}
					}
				}()
			}
			wg.Wait()
			took := time.Since(start)
			during := pk.end()
			after := measure(t, pid, s.ops)
			m := scrape(t, s.ops)
			t.Logf("%d cycles, %d at a time, in %v (%.0f cycles/s); %d steps failed (%v); hints posted to the server %d, sent %v, dropped %v",
				churnCycles, conc, took.Round(time.Millisecond), churnCycles/took.Seconds(), failed.Load(), firstErr.Load(),
				posts.count.Load(), m["kvhint_router_hints_sent_total"], sum(m, "kvhint_router_hints_dropped_total"))
			t.Logf("before %s; peak during %s; after %s; workers registered after %v", base, during, after, m["kvhint_router_workers"])
			if failed.Load() > 0 {
				t.Errorf("%d steps of the cycles failed; the first: %v", failed.Load(), firstErr.Load())
			}
			if got := m["kvhint_router_workers"]; got != 0 {
				t.Errorf("%v workers registered after every one was removed", got)
			}
			if posts.count.Load() == 0 {
				t.Errorf("no hint reached the server: the cycles never used a client")
			}
			// The bound: a live queue's sender and client cleaner for each
			// of the eight workers registered at most at once; the
			// cleaners of the clients no worker uses (tc.clients, each
			// until the idle timeout); and 200 for the servers and the
			// samplers' connections. Never one per cycle.
			maxGoroutines := 2*conc + tc.clients + 200
			if during.Goroutines > base.Goroutines+maxGoroutines || after.Goroutines > base.Goroutines+maxGoroutines {
				t.Errorf("goroutines %d at the peak, %d after, from %d: over %d more", during.Goroutines, after.Goroutines, base.Goroutines, maxGoroutines)
			}
			// RSS: 64 MiB over the start, a quarter of the container's
			// limit; the 279 MB came from the goroutines' stacks
			// and the clients they kept.
			if during.RSSMiB > base.RSSMiB+64 || after.RSSMiB > base.RSSMiB+64 {
				t.Errorf("RSS %.0f MiB at the peak, %.0f MiB after, from %.0f MiB: over 64 MiB more", during.RSSMiB, after.RSSMiB, base.RSSMiB)
			}
		})
	}
}

// send makes one request on the router's connection and checks its status.
func (r *router) send(method, path, body string, want int) error {
	req, err := http.NewRequest(method, strings.TrimSuffix(r.url, "/v1/bookings")+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %.200s, want %d", method, path, resp.StatusCode, b, want)
	}
	return nil
}

// countingServer answers 204 to a POST on any path and counts them: the
// hint endpoint of workers that each have a path of their own.
type countingServer struct {
	url   string
	count atomic.Int64
}

func startCountingServer(t *testing.T) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			cs.count.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return cs
}
