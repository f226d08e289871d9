package fault

// The bounds on what a peer or a config can grow: workers per source,
// connections to workers under a low descriptor limit, the memory of
// concurrent long bookings against the container's limit, and the metric
// series of policies a reload removed. Each test states its figures in
// its log; hack/bench-bounds.sh runs them for docs/benchmarks.md.

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// Defaults the tests below hold the sidecar to; docs/operations.md, "Limits
// and timeouts", states them.
const (
	defaultWorkersPerSource = 2048
	// memoryLimit is the container limit config/router sets, given to the
	// sidecar as the downward API gives it (bytes).
	memoryLimit    = 256 << 20
	memoryLimitEnv = "KVHINT_MEMORY_LIMIT=268435456"
)

func startSink(t *testing.T) *simworker.Server {
	t.Helper()
	srv, err := simworker.Start(simworker.New(simworker.Options{ID: "sink", Sink: true}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// bookAll books each of ids once on role decode (a kv-evict hint) from
// four routers, and returns the answers by status (-1: no answer within
// 5 s; a router gives up after five).
func bookAll(t *testing.T, s *sidecar, ids []string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for g := range 4 {
		r := newRouter(s, 1)
		r.c.Timeout = 5 * time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs := 0
			for i := g; i < len(ids) && errs < 5; i += 4 {
				code, _, err := r.book(bookingBody(fmt.Sprint("r", i), "decode", ids[i], 0))
				if err != nil {
					code = -1
					errs++
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return codes
}

// TestWorkersOverTheAPICapped: 6,000 workers registered over the API, each
// then hinted, against the default cap of 2,048 workers per source. Before
// the cap every one was registered, and each hinted worker cost a sender, a
// client and a connection (the report: 20,000 workers, 1.01 GB, 40,003
// goroutines, 19,999 fds). Now the registry holds 2,048, the rest are
// refused with a 400 naming the cap, and counted; goroutines, descriptors
// and RSS follow the cap, not the attempts.
func TestWorkersOverTheAPICapped(t *testing.T) {
	sink := startSink(t)
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers: []\n"})
	pid := s.proc.PID()
	base := measure(t, pid, s.ops)

	const attempts = 6000
	var ok, refused, other atomic.Int64
	var refusal atomic.Value
	var wg sync.WaitGroup
	for g := range 4 {
		c := &http.Client{Timeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < attempts; i += 4 {
				body := fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, sink.HintEndpoint())
				req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v1/workers/w%d", s.booking, i), strings.NewReader(body))
				resp, err := c.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				var b bytes.Buffer
				b.ReadFrom(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusBadRequest:
					refused.Add(1)
					refusal.CompareAndSwap(nil, b.String())
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	registered := measure(t, pid, s.ops)
	ids := make([]string, attempts)
	for i := range ids {
		ids[i] = fmt.Sprint("w", i)
	}
	codes := bookAll(t, s, ids)
	testenv.Eventually(t, 20*time.Second, "hints delivered", func(context.Context) error {
		m := scrape(t, s.ops)
		if q := m["kvhint_router_delivery_queued_hints"]; q != 0 {
			return fmt.Errorf("%v hints queued", q)
		}
		return nil
	})
	hinted := measure(t, pid, s.ops)
	m := scrape(t, s.ops)
	t.Logf("%d registrations: %d registered, %d refused, %d other; refusal: %v", attempts, ok.Load(), refused.Load(), other.Load(), refusal.Load())
	t.Logf("bookings by status %v; figures: at start %s; registered %s; each hinted %s", codes, base, registered, hinted)
	t.Logf("series: workers %v, over-limit refusals %v, hints sent %v, delivery errors %v",
		m["kvhint_router_workers"], m[`kvhint_router_workers_over_limit_total{source="api"}`], m["kvhint_router_hints_sent_total"], sum(m, "kvhint_router_delivery_errors_total"))

	if got := m["kvhint_router_workers"]; got != defaultWorkersPerSource {
		t.Errorf("%v workers registered, want the cap of %d", got, defaultWorkersPerSource)
	}
	if ok.Load() != defaultWorkersPerSource || refused.Load() != attempts-defaultWorkersPerSource || other.Load() != 0 {
		t.Errorf("registrations: %d ok, %d refused, %d other; want %d, %d, 0", ok.Load(), refused.Load(), other.Load(), defaultWorkersPerSource, attempts-defaultWorkersPerSource)
	}
	if got := m[`kvhint_router_workers_over_limit_total{source="api"}`]; got != attempts-defaultWorkersPerSource {
		t.Errorf("workers_over_limit_total{source=api} = %v, want %d", got, attempts-defaultWorkersPerSource)
	}
	if s, _ := refusal.Load().(string); !strings.Contains(s, "--max-workers-per-source") {
		t.Errorf("the refusal does not name the flag that sets the cap: %q", s)
	}
	// A hinted worker costs its sender and its client's cleaner; every
	// connection one descriptor.
	if hinted.Goroutines > 2*defaultWorkersPerSource+200 {
		t.Errorf("%d goroutines with %d workers hinted, over two per worker and 200", hinted.Goroutines, defaultWorkersPerSource)
	}
	if hinted.FDs > 2*defaultWorkersPerSource+100 {
		t.Errorf("%d descriptors with %d workers hinted, over two per worker and 100", hinted.FDs, defaultWorkersPerSource)
	}
	// A worker's queue (256 slots), client and buffers: about 50 KB.
	if grown := hinted.RSSMiB - base.RSSMiB; grown > 160 {
		t.Errorf("RSS grew by %.0f MiB for %d workers, over 160 MiB", grown, defaultWorkersPerSource)
	}
}

// TestManyHintedWorkersUnderFileLimit: under a 1,024-descriptor limit,
// 1,200 workers of the workers file are each hinted, so each wants a
// connection. Before the connection budget they took every descriptor and
// new booking connections hung in the listen backlog. Now connections to
// workers are held to what the limit leaves after the listeners' caps: new
// booking connections are accepted and answered, the descriptors stay
// under the limit, and the posts that found no connection are counted.
func TestManyHintedWorkersUnderFileLimit(t *testing.T) {
	sink := startSink(t)
	const n = 1200
	var ws strings.Builder
	ws.WriteString("workers:\n")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("f", i)
		ws.WriteString(workerLine(ids[i], sink.HintEndpoint()))
	}
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: ws.String(), nofile: 1024})
	pid := s.proc.PID()
	testenv.Eventually(t, 10*time.Second, "workers loaded", func(context.Context) error {
		if got := scrape(t, s.ops)["kvhint_router_workers"]; got != n {
			return fmt.Errorf("%v workers", got)
		}
		return nil
	})
	pk := samplePeaks(t, pid, s.ops)
	codes := bookAll(t, s, ids)
	codes2 := bookAll(t, s, ids)

	// New connections, each its own: what a router opening its pool, or
	// redialling, does.
	var fresh latencies
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			start := time.Now()
			resp, err := c.Post(s.booking+"/v1/bookings", "application/json", bytes.NewReader(bookingBody(fmt.Sprint("new", i), "decode", ids[i], 0)))
			fresh.add(time.Since(start), err)
			if err != nil {
				failed.Add(1)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	peak := pk.end()
	m := scrape(t, s.ops)
	t.Logf("bookings by status %v, again %v; 64 new connections: %s, %d failed; peak %s", codes, codes2, &fresh, failed.Load(), peak)
	t.Logf("hints sent %v, delivery errors %v (connection_limit %v), worker connections %v of %v",
		m["kvhint_router_hints_sent_total"], sum(m, "kvhint_router_delivery_errors_total"), m[`kvhint_router_delivery_errors_total{reason="connection_limit"}`],
		m["kvhint_router_worker_connections"], m["kvhint_router_worker_connections_limit"])
	if failed.Load() > 0 {
		t.Errorf("%d of 64 new booking connections failed (%v)", failed.Load(), fresh.err)
	}
	if peak.FDs >= 1024 {
		t.Errorf("%d descriptors at the peak: the limit of 1,024 was reached", peak.FDs)
	}
	if log := s.proc.Tail(1 << 20); strings.Contains(log, "too many open files") {
		t.Errorf("the sidecar ran out of descriptors")
	}
	if lim := m["kvhint_router_worker_connections_limit"]; lim <= 0 || lim > 1024-512-64 {
		t.Errorf("worker connection limit %v, want what 1,024 descriptors leave after the booking (512) and ops (64) caps", lim)
	}
	if m["kvhint_router_hints_sent_total"] < n {
		t.Errorf("%v hints sent for %d hinted workers, twice each: the budget starves delivery", m["kvhint_router_hints_sent_total"], n)
	}
}

// longBookings books 47,000-hash copies (bodies of about 960 KB) on role
// prefill from conns connections at once, each rounds times, and returns
// the answers by status and whether every 503 said Retry-After.
func longBookings(t *testing.T, s *sidecar, workers []string, conns, rounds int) (map[int]int, bool) {
	t.Helper()
	bodies := make([][]byte, len(workers))
	for i, w := range workers {
		bodies[i] = bookingBody("long", "prefill", w, 47000)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	retryAfter := true
	var wg sync.WaitGroup
	for g := range conns {
		r := newRouter(s, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				resp, err := r.c.Post(r.url, "application/json", bytes.NewReader(bodies[(g+i)%len(bodies)]))
				code := -1
				if err == nil {
					code = resp.StatusCode
					var b bytes.Buffer
					b.ReadFrom(resp.Body)
					resp.Body.Close()
					if code == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
						mu.Lock()
						retryAfter = false
						mu.Unlock()
					}
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return codes, retryAfter
}

// TestConcurrentLongBookingsUnderMemoryLimit: 256 connections each book a
// 47,000-hash copy four times at once, against the 256 MiB container limit
// config/router sets (given as the downward API gives it). Before the
// booking memory budget they peaked at 275-308 MB RSS. Now bookings past
// the budget are answered 503 with Retry-After at once and counted, the
// Go memory limit is a fraction of the container's, and RSS stays under
// the limit.
func TestConcurrentLongBookingsUnderMemoryLimit(t *testing.T) {
	sink := startSink(t)
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("p0", sink.HintEndpoint()), env: []string{memoryLimitEnv}})
	pid := s.proc.PID()
	base := measure(t, pid, s.ops)
	pk := samplePeaks(t, pid, s.ops)
	start := time.Now()
	codes, retryAfter := longBookings(t, s, []string{"p0"}, 256, 4)
	took := time.Since(start)
	peak := pk.end()
	m := scrape(t, s.ops)
	t.Logf("1,024 bookings of 47,000 hashes on 256 connections in %v: by status %v; before %s, peak %s; limit %d MiB",
		took.Round(time.Millisecond), codes, base, peak, memoryLimit>>20)
	t.Logf("refused for the budget %v, budget in use after %v, GOMEMLIMIT %v",
		m[`kvhint_router_bookings_refused_total{reason="memory_budget"}`], m["kvhint_router_booking_memory_bytes"], m["go_gc_gomemlimit_bytes"])
	if peak.RSSMiB >= memoryLimit>>20 {
		t.Errorf("peak RSS %.0f MiB, at or over the %d MiB container limit", peak.RSSMiB, memoryLimit>>20)
	}
	// 204: kv-fetch overran its deadline on the loaded machine, which is
	// not this test's fault to find.
	if codes[http.StatusOK] == 0 || codes[http.StatusOK]+codes[http.StatusNoContent]+codes[http.StatusServiceUnavailable] != 1024 {
		t.Errorf("answers %v: want only 200, 204 and 503, some 200", codes)
	}
	if got := m[`kvhint_router_bookings_refused_total{reason="memory_budget"}`]; got != float64(codes[http.StatusServiceUnavailable]) {
		t.Errorf("bookings_refused_total{reason=memory_budget} = %v, the routers saw %d 503s", got, codes[http.StatusServiceUnavailable])
	}
	if !retryAfter {
		t.Errorf("a 503 came without Retry-After")
	}
	if got := m["kvhint_router_booking_memory_bytes"]; got != 0 {
		t.Errorf("%v bytes of the booking budget still in use with no booking in flight", got)
	}
	if got, want := m["go_gc_gomemlimit_bytes"], math.Floor(float64(memoryLimit)*0.7); got != want {
		t.Errorf("GOMEMLIMIT %v, want 0.7 of the container's %d", got, memoryLimit)
	}
}

// TestStalledWorkersLongHintsUnderMemoryLimit: 20 workers that accept and
// never answer get 47,000-block hints (about 1 MB each) from 16
// connections for four seconds, against the 256 MiB limit. The hint byte
// budget holds the queues; RSS must stay under the limit (the report:
// 206 MB against a 64 MiB budget, without GOMEMLIMIT).
func TestStalledWorkersLongHintsUnderMemoryLimit(t *testing.T) {
	stall := startSilentServer(t)
	var ws strings.Builder
	ws.WriteString("workers:\n")
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprint("st", i))
		ws.WriteString(workerLine(ids[i], fmt.Sprintf("http://%s/v1/hints/%d", stall.addr(), i)))
	}
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: ws.String(), env: []string{memoryLimitEnv}})
	pid := s.proc.PID()
	base := measure(t, pid, s.ops)
	pk := samplePeaks(t, pid, s.ops)
	var rounds atomic.Int64
	var codesMu sync.Mutex
	codes := map[int]int{}
	until := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for g := range 16 {
		r := newRouter(s, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(until); i++ {
				code, _, err := r.book(bookingBody("long", "prefill", ids[(g+i)%len(ids)], 47000))
				if err != nil {
					code = -1
				}
				rounds.Add(1)
				codesMu.Lock()
				codes[code]++
				codesMu.Unlock()
			}
		}()
	}
	wg.Wait()
	peak := pk.end()
	m := scrape(t, s.ops)
	t.Logf("%d bookings of 47,000 hashes to 20 stalled workers: by status %v; before %s, peak %s; limit %d MiB; queued bytes now %v, dropped memory_budget %v",
		rounds.Load(), codes, base, peak, memoryLimit>>20, m["kvhint_router_delivery_queued_bytes"], m[`kvhint_router_hints_dropped_total{reason="memory_budget"}`])
	if peak.RSSMiB >= memoryLimit>>20 {
		t.Errorf("peak RSS %.0f MiB, at or over the %d MiB container limit", peak.RSSMiB, memoryLimit>>20)
	}
	if codes[http.StatusOK] == 0 {
		t.Errorf("no booking was answered 200: %v", codes)
	}
}

// TestReloadRenamingPoliciesDropsSeries: five reloads each rename the
// decode role's policies. Before, the series of every name ever loaded
// stayed on /metrics (five renames of 1,000 roles: 86k to 258k series);
// now only the policies in force have series.
func TestReloadRenamingPoliciesDropsSeries(t *testing.T) {
	w := startWorker(t, "d0")
	named := func(tag int) string {
		return fmt.Sprintf(`
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-evict
        name: evict-%d
      - type: kv-retain
        name: retain-%d
        parameters: {ttl_seconds: 60}
`, tag, tag)
	}
	s := startSidecar(t, sidecarOpts{config: named(0), workers: "workers:\n" + workerLine("d0", w.HintEndpoint())})
	r := newRouter(s, 1)
	policyLabel := regexp.MustCompile(`policy="([^"]*)"`)
	policies := func() []string {
		seen := map[string]bool{}
		for k := range scrape(t, s.ops) {
			if mm := policyLabel.FindStringSubmatch(k); mm != nil {
				seen[mm[1]] = true
			}
		}
		return slices.Sorted(func(yield func(string) bool) {
			for p := range seen {
				if !yield(p) {
					return
				}
			}
		})
	}
	counts := []int{}
	for tag := range 5 {
		if tag > 0 {
			writeFile(t, s.configPath, named(tag))
		}
		want := fmt.Sprintf("evict-%d", tag)
		testenv.Eventually(t, 10*time.Second, "reload "+want, func(context.Context) error {
			if code, _, err := r.book(bookingBody(fmt.Sprint("b", tag), "decode", "d0", 0)); err != nil || code != 200 {
				return fmt.Errorf("booking: %d %v", code, err)
			}
			if p := policies(); !slices.Contains(p, want) {
				return fmt.Errorf("policies with series: %v", p)
			}
			return nil
		})
		counts = append(counts, len(scrape(t, s.ops)))
	}
	got := policies()
	t.Logf("series after each load: %v; policies with series at the end: %v", counts, got)
	if want := []string{"evict-4", "retain-4"}; !slices.Equal(got, want) {
		t.Errorf("policies with series after five renames: %v, want only %v", got, want)
	}
	if counts[4] > counts[0] {
		t.Errorf("series grew from %d to %d over five renames", counts[0], counts[4])
	}
}

// TestBookingListenerSurvivesDescriptorExhaustion: with the booking
// listener's cap set above a 1,024-descriptor limit, 1,100 idle clients
// take every descriptor, then leave. Before, the booking server stopped on
// the first EMFILE from accept (fasthttp returns it) and never booked
// again; now the listener waits for descriptors and the next booking is
// answered.
func TestBookingListenerSurvivesDescriptorExhaustion(t *testing.T) {
	w := startWorker(t, "d0")
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("d0", w.HintEndpoint()),
		args: []string{"--max-booking-connections", "2000"}, nofile: 1024})
	pid := s.proc.PID()
	addr := strings.TrimPrefix(s.booking, "http://")
	var conns []net.Conn
	for range 1100 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	// Every descriptor taken: the kernel keeps the rest in the backlog.
	testenv.Eventually(t, 10*time.Second, "descriptors exhausted", func(context.Context) error {
		if f := measure(t, pid, ""); f.FDs < 1020 {
			return fmt.Errorf("%d descriptors", f.FDs)
		}
		return nil
	})
	during := measure(t, pid, "")
	for _, c := range conns {
		c.Close()
	}
	r := newRouter(s, 1)
	r.c.Timeout = 5 * time.Second
	var code int
	var err error
	testenv.Eventually(t, 15*time.Second, "a booking after the clients left", func(context.Context) error {
		code, _, err = r.book(bookingBody("after", "decode", "d0", 0))
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
	t.Logf("%d clients connected; %d descriptors during; the booking after they left: %d", len(conns), during.FDs, code)
	if log := s.proc.Tail(1 << 20); strings.Contains(log, "HTTP server stopped") {
		t.Errorf("a server stopped:\n%s", log[max(0, len(log)-2048):])
	}
}
