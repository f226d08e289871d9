package fault

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func startWorker(t *testing.T, id string) *simworker.Server {
	t.Helper()
	srv, err := simworker.Start(simworker.New(simworker.Options{ID: id}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func workerLine(id, endpoint string) string {
	return fmt.Sprintf("  - {id: %s, capabilities: [router_hint], hint_endpoint: '%s'}\n", id, endpoint)
}

// peaks samples a process's figures every 100 ms until stopped and keeps
// the largest of each.
type peaks struct {
	mu   sync.Mutex
	max  figures
	stop chan struct{}
	done chan struct{}
}

func samplePeaks(t *testing.T, pid int, ops string) *peaks {
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			f := measure(t, pid, ops)
			p.mu.Lock()
			p.max.FDs = max(p.max.FDs, f.FDs)
			p.max.Goroutines = max(p.max.Goroutines, f.Goroutines)
			p.max.RSSMiB = max(p.max.RSSMiB, f.RSSMiB)
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *peaks) end() figures {
	close(p.stop)
	<-p.done
	return p.max
}

// TestTricklingClientsUnderFileLimit: the report's attack on the booking
// listener under a 1,024-descriptor limit, scaled to 1,500 clients that
// each declare a 1 MiB booking body and trickle a byte every 300 ms. The
// router's keep-alive connections, opened before, keep booking with their
// latency; /metrics answers; a config reload succeeds; descriptors stay
// under the connection caps, goroutines under two per allowed connection,
// RSS near what arrived (not what was declared); the attackers are refused
// and counted, and those let in are cut at the read timeout.
func TestTricklingClientsUnderFileLimit(t *testing.T) {
	w := startWorker(t, "d0")
	s := startSidecar(t, sidecarOpts{
		config: hintsConfig(0), workers: "workers:\n" + workerLine("d0", w.HintEndpoint()),
		args: []string{"--http-read-timeout", "3s"}, nofile: 1024,
	})
	pid := s.proc.PID()
	rs := routerPool(t, s, 4, bookingBody("warm", "decode", "d0", 0))
	base := measure(t, pid, s.ops)
	t.Logf("before the attack: %s", base)

	const attackers = 1500
	pk := samplePeaks(t, pid, s.ops)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	head := []byte("POST /v1/bookings HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{")
	addr := strings.TrimPrefix(s.booking, "http://")
	for range attackers {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue // refused at the door: fine
		}
		c.Write(head)
		conns = append(conns, c)
	}
	stopTrickle := make(chan struct{})
	var trickled sync.WaitGroup
	trickled.Add(1)
	go func() {
		defer trickled.Done()
		for {
			select {
			case <-stopTrickle:
				return
			case <-time.After(300 * time.Millisecond):
			}
			for _, c := range conns {
				c.SetWriteDeadline(time.Now().Add(time.Millisecond))
				c.Write([]byte("1"))
			}
		}
	}()

	// During the attack: bookings, a scrape and a config reload.
	var lat latencies
	var failed atomic.Int64
	var wg sync.WaitGroup
	until := time.Now().Add(2 * time.Second)
	for g, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(until); i++ {
				code, d, err := r.book(bookingBody(fmt.Sprintf("atk-%d-%d", g, i), "decode", "d0", 0))
				if err != nil || code != 200 {
					failed.Add(1)
				}
				lat.add(d, err)
			}
		}()
	}
	scrapeStart := time.Now()
	scrape(t, s.ops) // timed: /metrics must answer during the attack
	scrapeTook := time.Since(scrapeStart)
	writeFile(t, s.configPath, hintsConfig(1))
	newHash := hintsconfig.ContentHash([]byte(hintsConfig(1)))
	testenv.Eventually(t, 5*time.Second, "config reload during the attack", func(context.Context) error {
		if v := scrape(t, s.ops)[`kvhint_router_config_info{hash="`+newHash+`"}`]; v != 1 {
			return fmt.Errorf("config %s not in force", newHash)
		}
		return nil
	})
	wg.Wait()
	during := measure(t, pid, s.ops)
	close(stopTrickle)
	trickled.Wait()
	peak := pk.end()
	m := scrape(t, s.ops)
	t.Logf("during the attack (%d clients, %d connected): %s; peak %s; bookings %s; /metrics in %v; refused %v",
		attackers, len(conns), during, peak, &lat, scrapeTook.Round(time.Millisecond), m[`kvhint_router_connections_refused_total{listener="booking"}`])

	if n := failed.Load(); n > 0 {
		t.Errorf("%d bookings failed during the attack: %v", n, lat.err)
	}
	if p99, mx := lat.quantile(0.99), lat.quantile(1); p99 > 250*time.Millisecond || mx > time.Second {
		t.Errorf("booking latency during the attack: p99 %v, max %v; want under 250 ms and 1 s", p99, mx)
	}
	if refused := m[`kvhint_router_connections_refused_total{listener="booking"}`]; refused < attackers-600 {
		t.Errorf("%v connections refused, want at least %d", refused, attackers-600)
	}
	if v := m[`kvhint_router_config_reloads_total{result="failure"}`]; v != 0 {
		t.Errorf("%v config reloads failed during the attack", v)
	}
	// Bounds: 512 booking and 64 ops connections, and what the sidecar
	// needs besides (about 20 descriptors).
	if peak.FDs > 512+64+64 {
		t.Errorf("peak descriptors %d, over the caps (512 + 64) and 64 more", peak.FDs)
	}
	if peak.Goroutines > 2*(512+64)+100 {
		t.Errorf("peak goroutines %d, over two per allowed connection", peak.Goroutines)
	}
	if grown := peak.RSSMiB - base.RSSMiB; grown > 150 {
		t.Errorf("RSS grew by %.0f MiB under bodies that declare 1 MiB and send a few bytes", grown)
	}

	// After: the trickling connections are cut at the read timeout.
	testenv.Eventually(t, 6*time.Second, "connections back after the attack", func(context.Context) error {
		f := measure(t, pid, s.ops)
		if open := scrape(t, s.ops)[`kvhint_router_open_connections{listener="booking"}`]; open > 8 || f.FDs > base.FDs+16 {
			return fmt.Errorf("%v booking connections open, %s", open, f)
		}
		return nil
	})
	t.Logf("after the attack: %s", measure(t, pid, s.ops))
	if log := s.proc.Tail(1 << 20); strings.Contains(log, "too many open files") {
		t.Errorf("the sidecar ran out of descriptors:\n%s", log[max(0, len(log)-2048):])
	}
}

// TestStalledWorkersAndLargeHints: of nine workers, four accept TCP and
// never finish TLS, four accept HTTP and never answer, one is healthy;
// bookings with 3,000-block copies (hints of about 61 KiB, near the 64 KiB
// payload limit) go to all of
// them for four seconds. RSS stays within the hint byte budget, the
// stalled workers hold at most two connections each, bookings keep their
// latency, and once the queues are quiet every hinted booking is counted
// once: sent, dropped (by reason) or failed (by reason).
func TestStalledWorkersAndLargeHints(t *testing.T) {
	healthy := startWorker(t, "ok")
	tlsStall, httpStall := startSilentServer(t), startSilentServer(t)
	ws := "workers:\n" + workerLine("ok", healthy.HintEndpoint())
	var ids []string
	for i := range 4 {
		ws += workerLine(fmt.Sprint("tls", i), fmt.Sprintf("https://%s/v1/hints/%d", tlsStall.addr(), i))
		ws += workerLine(fmt.Sprint("http", i), fmt.Sprintf("http://%s/v1/hints/%d", httpStall.addr(), i))
		ids = append(ids, fmt.Sprint("tls", i), fmt.Sprint("http", i))
	}
	ids = append(ids, "ok")
	const budgetMiB = 16
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: ws, args: []string{
		"--delivery-timeout", "200ms", "--hint-ttl", "1s", "--queue-size", "256",
		"--max-queued-hint-bytes", fmt.Sprint(budgetMiB << 20)}})
	pid := s.proc.PID()
	rs := routerPool(t, s, 4, bookingBody("warm", "decode", "nobody", 0))
	base := measure(t, pid, s.ops)
	pk := samplePeaks(t, pid, s.ops)

	body := map[string][]byte{}
	for _, id := range ids {
		body[id] = bookingBody("big", "prefill", id, 3000)
	}
	if code, _, err := rs[0].book(body["ok"]); code != 200 || err != nil {
		t.Fatalf("a large booking: %d %v", code, err)
	}
	var hinted, toHealthy atomic.Int64
	hinted.Add(1)
	toHealthy.Add(1)
	var lat latencies
	var wg sync.WaitGroup
	until := time.Now().Add(4 * time.Second)
	for g, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(until); i++ {
				id := ids[(g+i)%len(ids)]
				code, d, err := r.book(body[id])
				lat.add(d, err)
				if code == 200 {
					hinted.Add(1)
					if id == "ok" {
						toHealthy.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	peak := pk.end()
	_, tlsPeak, tlsAccepted := tlsStall.counts()
	_, httpPeak, _ := httpStall.counts()
	t.Logf("before: %s; peak: %s; bookings %s; TLS-stalled workers: %d connections at most (%d dialled), HTTP-stalled: %d at most",
		base, peak, &lat, tlsPeak, tlsAccepted, httpPeak)
	if grown := peak.RSSMiB - base.RSSMiB; grown > budgetMiB+64 {
		t.Errorf("RSS grew by %.0f MiB, over the %d MiB hint budget and 64 MiB of slack", grown, budgetMiB)
	}
	if tlsPeak > 4*2 || httpPeak > 4*2 {
		t.Errorf("stalled workers held %d (TLS) and %d (HTTP) connections at once, over two per worker", tlsPeak, httpPeak)
	}
	if p99 := lat.quantile(0.99); p99 > 250*time.Millisecond {
		t.Errorf("booking p99 %v with stalled workers, want under 250 ms", p99)
	}

	// Once every queue has emptied (TTL 1 s, posts 200 ms), the books balance.
	var m map[string]float64
	testenv.Eventually(t, 10*time.Second, "queues empty", func(context.Context) error {
		m = scrape(t, s.ops)
		if q := m["kvhint_router_delivery_queued_hints"]; q != 0 {
			return fmt.Errorf("%v hints queued", q)
		}
		if b := m["kvhint_router_delivery_queued_bytes"]; b != 0 {
			return fmt.Errorf("%v bytes queued", b)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // the last posts in flight
	m = scrape(t, s.ops)
	sent := m["kvhint_router_hints_sent_total"]
	dropped := sum(m, "kvhint_router_hints_dropped_total")
	failed := sum(m, "kvhint_router_delivery_errors_total")
	booked := m[`kvhint_router_bookings_total{outcome="hinted",role="prefill"}`]
	t.Logf("%v hinted bookings: %v sent, %v dropped (memory_budget %v, queue_full %v, stale %v), %v failed (timeout %v, transport %v)",
		booked, sent, dropped, m[`kvhint_router_hints_dropped_total{reason="memory_budget"}`], m[`kvhint_router_hints_dropped_total{reason="queue_full"}`],
		m[`kvhint_router_hints_dropped_total{reason="stale"}`], failed, m[`kvhint_router_delivery_errors_total{reason="timeout"}`], m[`kvhint_router_delivery_errors_total{reason="transport"}`])
	if booked != float64(hinted.Load()) {
		t.Errorf("the sidecar counted %v hinted bookings, the router saw %d", booked, hinted.Load())
	}
	if sent+dropped+failed != booked {
		t.Errorf("sent %v + dropped %v + failed %v = %v, want every one of %v hinted bookings counted once", sent, dropped, failed, sent+dropped+failed, booked)
	}
	if got := float64(healthy.Accepted()); got != sent {
		t.Errorf("the healthy worker accepted %v hints, the sidecar counts %v sent", got, sent)
	}
	// The stalled workers take no more than their share of the budget:
	// the healthy worker gets its hints.
	if got, want := healthy.Accepted(), toHealthy.Load(); float64(got) < 0.9*float64(want) {
		t.Errorf("the healthy worker received %d of its %d hints: the stalled ones starved it", got, want)
	}
	if m[`kvhint_router_hints_dropped_total{reason="memory_budget"}`] == 0 {
		t.Error("no hint was dropped for the memory budget")
	}
	perWorker := 0.0
	for _, id := range ids {
		perWorker += sum(m, `kvhint_router_worker_hints_dropped_total{reason="memory_budget",worker="`+id+`"}`)
	}
	if perWorker != m[`kvhint_router_hints_dropped_total{reason="memory_budget"}`] {
		t.Errorf("memory_budget drops by worker add up to %v, the total is %v", perWorker, m[`kvhint_router_hints_dropped_total{reason="memory_budget"}`])
	}
	after := measure(t, pid, s.ops)
	t.Logf("after: %s", after)
	if after.FDs > base.FDs+4*2+4+8 {
		t.Errorf("%d descriptors after the queues emptied, %d before", after.FDs, base.FDs)
	}
}

// TestReloadRevert: a bad config, the config in force again, the same bad
// config again. The binary's metrics say each step.
func TestReloadRevert(t *testing.T) {
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers: []\n"})
	bad := "worker_selection:\n  decode: {type: no-such-selection}\n"
	step := func(doc string, ok, failures float64) {
		t.Helper()
		writeFile(t, s.configPath, doc)
		testenv.Eventually(t, 5*time.Second, "reload", func(context.Context) error {
			m := scrape(t, s.ops)
			if m["kvhint_router_config_last_reload_successful"] != ok || m[`kvhint_router_config_reloads_total{result="failure"}`] != failures {
				return fmt.Errorf("last_reload_successful %v, failures %v; want %v, %v",
					m["kvhint_router_config_last_reload_successful"], m[`kvhint_router_config_reloads_total{result="failure"}`], ok, failures)
			}
			return nil
		})
	}
	step(bad, 0, 1)
	step(hintsConfig(0), 1, 1)
	step(bad, 0, 2)
	if n := strings.Count(s.proc.Tail(1<<20), "Cannot load hints config"); n != 2 {
		t.Errorf("%d failure logs, want 2", n)
	}
}

// TestSIGTERMDrainsHintsFirst: SIGTERM with twenty clients stalled in a
// booking body and twenty hints queued to a worker that takes 50 ms a
// hint. Every hint reaches the worker and the sidecar exits once they
// have, not at the end of its 5 s shutdown budget.
func TestSIGTERMDrainsHintsFirst(t *testing.T) {
	w := simworker.New(simworker.Options{ID: "slow"})
	w.SetBehaviour(http.StatusNoContent, 50*time.Millisecond)
	srv, err := simworker.Start(w, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("slow", srv.HintEndpoint()),
		args: []string{"--hint-ttl", "1m", "--http-read-timeout", "30s"}})
	r := newRouter(s, 1)
	for i := range 20 {
		if code, _, err := r.book(bookingBody(fmt.Sprint("drain-", i), "decode", "slow", 0)); err != nil || code != 200 {
			t.Fatalf("booking: %d %v", code, err)
		}
	}
	addr := strings.TrimPrefix(s.booking, "http://")
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("POST /v1/bookings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"))
	}
	testenv.Eventually(t, 5*time.Second, "stalled clients in", func(context.Context) error {
		if n := scrape(t, s.ops)[`kvhint_router_open_connections{listener="booking"}`]; n < 20 {
			return fmt.Errorf("%v open", n)
		}
		return nil
	})
	start := time.Now()
	if err := s.proc.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	got := w.Accepted()
	t.Logf("SIGTERM to exit: %v; the worker received %d of 20 hints", took.Round(time.Millisecond), got)
	if got != 20 {
		t.Errorf("the worker received %d of 20 queued hints", got)
	}
	if took > 3*time.Second {
		t.Errorf("shutdown took %v of its 5 s budget", took)
	}
	_ = context.Background
}
