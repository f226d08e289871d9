package sidecar

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/internal/dev/loadgen"
	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
)

// TestLoadLongCopies is a load run, not a CI check: it runs only with
// KVHINT_LOAD=1. The load generator books every request on two roles over
// real HTTP, each booking with a committed copy of 8,192 blocks (a
// 128k-token prompt at block size 16): "prefill" runs the built-ins
// kv-fetch and kv-evict, "aggregated" runs kv-fetch and a custom policy that
// sleeps 2 ms. The built-ins must lose nothing to the policy deadline; the
// sleeping policy, under its hard deadline, keeps the actions of the runs
// it makes and is ejected for its overruns. KVHINT_LOAD_RATE (300) and
// KVHINT_LOAD_SECONDS (20) set the run.
func TestLoadLongCopies(t *testing.T) {
	if os.Getenv("KVHINT_LOAD") == "" {
		t.Skip("a load run: set KVHINT_LOAD=1")
	}
	rate, seconds := 300.0, 20
	if v, err := strconv.ParseFloat(os.Getenv("KVHINT_LOAD_RATE"), 64); err == nil {
		rate = v
	}
	if v, err := strconv.Atoi(os.Getenv("KVHINT_LOAD_SECONDS")); err == nil {
		seconds = v
	}
	const cfg = `
worker_selection:
  prefill:
    type: kvcr
    hints: [{type: kv-fetch}, {type: kv-evict}]
  aggregated:
    type: kvcr
    hints: [{type: kv-fetch}, {type: test-slow, parameters: {sleep: 2ms}}]
`
	// KVHINT_LOAD_PER_BLOCK overrides the deadline's budget per block
	// (-1ns: none, the deadline of a fixed 1 ms as before), to compare.
	perBlock, _ := time.ParseDuration(os.Getenv("KVHINT_LOAD_PER_BLOCK"))
	s := startSidecarWithConfig(t, testCatalog(t), cfg, func(o *Options) { o.Log = logr.Discard(); o.PolicyDeadlinePerBlock = perBlock })
	var ids []string
	for i := range 4 {
		id := fmt.Sprintf("w%d", i)
		srv, err := simworker.Start(simworker.New(simworker.Options{ID: id, WorkerType: "prefill", Sink: true}), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		registerWorker(t, s, srv)
		ids = append(ids, id)
	}
	o := loadgen.Options{
		Target: "http://" + s.BookingAddr(), Rate: rate, Duration: time.Duration(seconds) * time.Second, Connections: 16,
		Roles: []loadgen.Role{
			{Name: "prefill", Workers: ids, CopyRate: 1, CopyBlocks: 8192},
			{Name: "aggregated", Workers: ids, CopyRate: 1, CopyBlocks: 8192},
		},
		MaxTurns: 4, BlockSize: 16, Seed: 1, Timeout: 5 * time.Second, IDPrefix: "load-",
	}
	before := loadavg()
	res, err := loadgen.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	after := loadavg()
	m := s.Metrics
	report := res.Report(o)
	for _, role := range []string{"prefill", "aggregated"} {
		report += fmt.Sprintf("role %s: hinted %v, kv-fetch deadline failures %v, malformed %v, kv-fetch actions %v\n", role,
			counter(t, m, "bookings", role, "hinted"),
			counter(t, m, "failures", role, "kv-fetch", "kv-fetch", "deadline"),
			counter(t, m, "failures", role, "kv-fetch", "kv-fetch", "malformed"),
			counter(t, m, "actions", role, "kv-fetch", "kv-fetch"))
	}
	slow := counter(t, m, "failures", "aggregated", "test-slow", "test-slow", "deadline")
	evictDeadline := counter(t, m, "failures", "prefill", "kv-evict", "kv-evict", "deadline")
	report += fmt.Sprintf("kv-evict deadline failures %v; test-slow (sleeps 2 ms) deadline failures %v\n", evictDeadline, slow)
	ejections := gathered(t, m, "kvhint_router_policy_ejections_total", map[string]string{"role": "aggregated", "policy": "test-slow", "policy_type": "test-slow", "reason": "overrun"})
	report += fmt.Sprintf("test-slow ejections for overruns %v, bookings that skipped it %v\n", ejections,
		gathered(t, m, "kvhint_router_policy_runs_skipped_total", map[string]string{"role": "aggregated", "policy": "test-slow", "policy_type": "test-slow", "reason": "ejected"}))
	report += fmt.Sprintf("hints sent %v, dropped %v (queue full) %v (stale)\n",
		gathered(t, m, "kvhint_router_hints_sent_total", map[string]string{}),
		counter(t, m, "hints_dropped", "queue_full"), counter(t, m, "hints_dropped", "stale"))
	report += fmt.Sprintf("load average before: %s; after: %s\n", before, after)
	t.Log("\n" + report)
	if p := os.Getenv("KVHINT_E2E_REPORT"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprint(f, report)
			f.Close()
		}
	}
	if perBlock < 0 {
		return // a comparison run: report only
	}
	for _, role := range []string{"prefill", "aggregated"} {
		if n := counter(t, m, "failures", role, "kv-fetch", "kv-fetch", "deadline"); n != 0 {
			t.Errorf("role %s: kv-fetch lost %v runs to the deadline", role, n)
		}
		if n := counter(t, m, "failures", role, "kv-fetch", "kv-fetch", "malformed"); n != 0 {
			t.Errorf("role %s: kv-fetch lost %v runs as malformed", role, n)
		}
	}
	if evictDeadline != 0 {
		t.Errorf("kv-evict lost %v runs to the deadline", evictDeadline)
	}
	if slow != 0 {
		t.Errorf("the sleeping policy (2 ms, under its hard deadline) lost %v runs to the deadline, want 0: a late run keeps its actions", slow)
	}
	if ejections == 0 {
		t.Error("the sleeping policy overran on every run and was never ejected")
	}
}

func loadavg() string {
	out, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
