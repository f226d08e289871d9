package fault

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// The slow-policy faults of issue 21: a custom policy that sleeps 5 ms,
// listed after kv-fetch, and one that never returns. They run a kvhint
// built with that policy linked in (testdata/kvhint-slow), as a custom
// build links a plugin.

var (
	slowOnce sync.Once
	slowBin  string
	slowErr  error
)

// kvhintSlow builds testdata/kvhint-slow once.
func kvhintSlow(t *testing.T) string {
	t.Helper()
	slowOnce.Do(func() {
		slowBin = filepath.Join(tmpDir, "kvhint-slow")
		build := exec.Command("go", "build", "-o", slowBin, "./testdata/kvhint-slow")
		if out, err := build.CombinedOutput(); err != nil {
			slowErr = fmt.Errorf("building kvhint-slow: %v\n%s", err, out)
		}
	})
	if slowErr != nil {
		t.Fatal(slowErr)
	}
	return slowBin
}

// slowConfig: prefill runs kv-fetch, then the custom policy; decode runs
// kv-fetch alone, the floor measured in the same run.
func slowConfig(sleep string) string {
	return fmt.Sprintf(`
worker_selection:
  prefill:
    type: kvcr
    hints:
      - type: kv-fetch
      - {type: test-slow, name: slow, parameters: {sleep: %s}}
  decode:
    type: kvcr
    hints:
      - type: kv-fetch
`, sleep)
}

// series sums the series of a metric whose labels include every k="v" of
// labels.
func series(m map[string]float64, metric string, labels ...string) float64 {
	total := 0.0
next:
	for k, v := range m {
		if !strings.HasPrefix(k, metric+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		total += v
	}
	return total
}

var slowLabels = []string{`role="prefill"`, `policy="slow"`}

// bookOnce books once on role and returns the answer's action count.
func bookOnce(r *router, role string, i int) (actions int, d time.Duration, err error) {
	body := bookingBody(fmt.Sprintf("%s-%d-%d", role, time.Now().UnixNano(), i), role, "d0", 8)
	start := time.Now()
	resp, err := r.c.Post(r.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, time.Since(start), err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d = time.Since(start)
	if err != nil {
		return 0, d, err
	}
	if resp.StatusCode != 200 {
		return 0, d, fmt.Errorf("booking answered %d: %s", resp.StatusCode, b)
	}
	return bytes.Count(b, []byte(`"action_type"`)), d, nil
}

// bookSeq books n times in a row on role and returns the latencies and
// the answers' action counts (count of actions: bookings).
func bookSeq(t *testing.T, r *router, role string, n int) (*latencies, map[int]int) {
	t.Helper()
	var lat latencies
	actions := map[int]int{}
	for i := range n {
		a, d, err := bookOnce(r, role, i)
		if err != nil {
			t.Fatal(err)
		}
		lat.add(d, nil)
		actions[a]++
	}
	return &lat, actions
}

// TestSlowPolicyEjected: the 5 ms policy after kv-fetch. Its late
// runs keep their actions; after --policy-eject-after overruns in a row it
// is ejected, and bookings of its role answer at their floor (the same
// run's bookings of a role without it) with kv-fetch's action alone. When
// its backoff ends it runs on probation, overruns again and is ejected for
// twice as long. Each transition is logged once and counted. Before the
// fix every booking of the role waited the 5 ms and lost the policy's
// action to the deadline, and nothing took the policy out of the path.
func TestSlowPolicyEjected(t *testing.T) {
	bin := kvhintSlow(t)
	w := startWorker(t, "d0")
	s := startSidecar(t, sidecarOpts{bin: bin, config: slowConfig("5ms"), workers: "workers:\n" + workerLine("d0", w.HintEndpoint()),
		// The hard deadline of 1 s keeps a 5 ms run on a loaded machine
		// from being abandoned, which would eject it for another reason.
		args: []string{"--policy-deadline", "1ms", "--policy-hard-deadline", "1s", "--policy-eject-after", "5", "--policy-ejection-base", "2s", "--policy-ejection-multiplier", "2",
			"--policy-ejection-max", "1m", "--policy-probation-runs", "50"}})
	r := newRouter(s, 1)
	bookSeq(t, r, "decode", 20) // warm the connection

	ejectStart := time.Now()
	late, actions := bookSeq(t, r, "prefill", 5)
	timeToEject := time.Since(ejectStart)
	if actions[2] != 5 {
		t.Errorf("the 5 overrunning bookings carried %v actions (count: bookings); want 2 each: a late run keeps its action", actions)
	}
	m := scrape(t, s.ops)
	if n := series(m, "kvhint_router_policy_overruns_total", slowLabels...); n != 5 {
		t.Errorf("overruns counted %v, want 5", n)
	}
	if n := series(m, "kvhint_router_policy_failures_total", append(slowLabels, `reason="deadline"`)...); n != 0 {
		t.Errorf("deadline failures %v, want 0", n)
	}
	if n := series(m, "kvhint_router_policy_ejected", slowLabels...); n != 1 {
		t.Fatalf("policy_ejected %v after 5 overruns in a row, want 1", n)
	}
	if n := series(m, "kvhint_router_policy_ejections_total", append(slowLabels, `reason="overrun"`)...); n != 1 {
		t.Errorf("ejections (overrun) %v, want 1", n)
	}

	// Ejected: the role books at its floor, without the policy.
	floor, _ := bookSeq(t, r, "decode", 200)
	ejected, actions := bookSeq(t, r, "prefill", 200)
	if actions[1] != 200 {
		t.Errorf("while ejected, bookings carried %v actions (count: bookings); want kv-fetch's alone", actions)
	}
	m = scrape(t, s.ops)
	if n := series(m, "kvhint_router_policy_runs_skipped_total", append(slowLabels, `reason="ejected"`)...); n != 200 {
		t.Errorf("bookings that skipped the ejected policy: %v, want 200", n)
	}
	// A booking that ran the policy takes its 5 ms on top of the floor's
	// work: the ejected role's median stays below that, whatever the
	// machine's load does to both.
	if p50, f50 := ejected.quantile(0.5), floor.quantile(0.5); p50 >= f50+5*time.Millisecond {
		t.Errorf("median booking %v while the policy is ejected, the floor's %v; it cannot have skipped the 5 ms policy", p50, f50)
	}
	t.Logf("overrunning: %s; time to eject %v", late, timeToEject.Round(time.Microsecond))
	t.Logf("ejected: %s; floor (decode, kv-fetch alone): %s; p99 ratio %.2f", ejected, floor,
		float64(ejected.quantile(0.99))/float64(max(floor.quantile(0.99), 1)))

	// Probation after 2 s: one overrun ejects it again, for 4 s.
	testenv.Eventually(t, 10*time.Second, "the policy on probation", func(context.Context) error {
		if n := series(scrape(t, s.ops), "kvhint_router_policy_probation", slowLabels...); n != 1 {
			return fmt.Errorf("policy_probation %v", n)
		}
		return nil
	})
	_, actions = bookSeq(t, r, "prefill", 1)
	if actions[2] != 1 {
		t.Errorf("the run on probation carried %v actions; want both", actions)
	}
	m = scrape(t, s.ops)
	if n := series(m, "kvhint_router_policy_ejections_total", append(slowLabels, `reason="overrun"`)...); n != 2 {
		t.Errorf("ejections (overrun) %v after an overrun on probation, want 2", n)
	}
	if n := series(m, "kvhint_router_policy_ejected", slowLabels...); n != 1 {
		t.Errorf("policy_ejected %v after an overrun on probation, want 1", n)
	}
	log := s.proc.Tail(1 << 20)
	if n := strings.Count(log, "Hint policy ejected from its role's path"); n != 2 {
		t.Errorf("ejections logged %d times, want 2 (once per transition)", n)
	}
	if n := strings.Count(log, "Hint policy re-admitted on probation"); n != 1 {
		t.Errorf("re-admissions logged %d times, want 1", n)
	}
	if !strings.Contains(log, `"for":"2s"`) || !strings.Contains(log, `"for":"4s"`) {
		t.Errorf("the ejections' backoffs are not 2s then 4s; the log:\n%s", log)
	}
}

// TestHangingPolicyBounded: a policy that never returns. Every booking of
// its role answers within the hard deadline with kv-fetch's action, the
// policy is ejected at its first abandoned run, and the goroutines it
// holds stay within --policy-max-runs however many bookings come while it
// is re-admitted every 50 ms. Before the fix each booking of the role
// hung for as long as the policy did.
func TestHangingPolicyBounded(t *testing.T) {
	bin := kvhintSlow(t)
	w := startWorker(t, "d0")
	s := startSidecar(t, sidecarOpts{bin: bin, config: slowConfig("forever"), workers: "workers:\n" + workerLine("d0", w.HintEndpoint()),
		args: []string{"--policy-hard-deadline", "20ms", "--policy-ejection-base", "50ms", "--policy-ejection-multiplier", "1",
			"--policy-ejection-max", "50ms", "--policy-max-runs", "8"}})
	pid := s.proc.PID()
	base := measure(t, pid, s.ops)

	var lat latencies
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[int]int{}
	until := time.Now().Add(2 * time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newRouter(s, 1)
			r.c.Timeout = 5 * time.Second
			for i := 0; time.Now().Before(until); i++ {
				a, d, err := bookOnce(r, "prefill", i)
				lat.add(d, err)
				if err != nil {
					return
				}
				mu.Lock()
				counts[a]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	after := measure(t, pid, s.ops)
	m := scrape(t, s.ops)
	t.Logf("before: %s; after: %s; bookings of the hanging policy's role: %s; actions per booking: %v", base, after, &lat, counts)
	if len(lat.err) > 0 {
		t.Errorf("bookings failed: %v", lat.err)
	}
	if counts[1] == 0 || counts[2] != 0 || counts[0] != 0 {
		t.Errorf("actions per booking %v (count: bookings); want kv-fetch's alone in every answer", counts)
	}
	// The hard deadline is 20 ms; a booking that waited for the policy
	// would wait forever (the client gives up at 5 s).
	if mx := lat.quantile(1); mx > 2*time.Second {
		t.Errorf("a booking took %v: it waited for the hanging policy", mx)
	}
	abandoned := series(m, "kvhint_router_policy_failures_total", append(slowLabels, `reason="deadline"`)...)
	held := series(m, "kvhint_router_policy_abandoned_runs", slowLabels...)
	if abandoned < 1 || held < 1 || held > 8 {
		t.Errorf("abandoned runs %v, held now %v; want at least one, and at most --policy-max-runs 8 held", abandoned, held)
	}
	if n := series(m, "kvhint_router_policy_ejections_total", append(slowLabels, `reason="abandoned"`)...); n < 1 {
		t.Errorf("ejections for an abandoned run: %v, want at least 1", n)
	}
	// Goroutines: the policy's runs (at most 8) and what serving takes.
	if grown := after.Goroutines - base.Goroutines; grown > 8+16 {
		t.Errorf("goroutines grew by %d, over the 8 runs allowed and 16 for the 8 connections", grown)
	}
	t.Logf("abandoned runs %v, held %v, ejections (abandoned) %v, skipped (ejected) %v, skipped (busy) %v", abandoned, held,
		series(m, "kvhint_router_policy_ejections_total", append(slowLabels, `reason="abandoned"`)...),
		series(m, "kvhint_router_policy_runs_skipped_total", append(slowLabels, `reason="ejected"`)...),
		series(m, "kvhint_router_policy_runs_skipped_total", append(slowLabels, `reason="busy"`)...))
}
