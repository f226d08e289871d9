package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// dispatchConfig and rulesConfig have one role per dispatch rule; a
// policy file holds at most Dynamo's four worker types, so the rules take
// two files. Each misbehaving policy sits between two well-behaved ones,
// so a test sees that only its own actions are dropped and that the
// numbering closes the gap. dispatchConfig, which most tests run, has the
// built-ins (decode), a policy that panics (aggregated), one that counts
// its runs (prefill) and no hints (encode).
const dispatchConfig = `
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: kv-fetch
      - type: kv-retain
        parameters: {ttl_seconds: 600}
      - type: kv-evict
  aggregated:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-static, name: before, parameters: {tag: before}}
      - type: test-panic
      - {type: test-static, name: after, parameters: {tag: after}}
  prefill:
    type: dynamo-default-cost-fn
    hints:
      - type: test-count
  encode:
    type: dynamo-default-cost-fn
    hints: []
`

// rulesConfig has the other rules: a policy that errs (decode), one past
// its deadline (aggregated), malformed actions (prefill) and too many
// actions (encode).
const rulesConfig = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-static, name: before, parameters: {tag: before}}
      - type: test-error
      - {type: test-static, name: after, parameters: {tag: after}}
  aggregated:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-static, name: before, parameters: {tag: before}}
      - {type: test-slow, parameters: {sleep: 30ms}}
      - {type: test-static, name: after, parameters: {tag: after}}
  prefill:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-static, name: before, parameters: {tag: before}}
      - {type: test-malformed, name: empty-type, parameters: {kind: empty-type}}
      - {type: test-malformed, name: bad-type, parameters: {kind: bad-type}}
      - {type: test-malformed, name: bad-version, parameters: {kind: bad-version}}
      - {type: test-malformed, name: bad-payload, parameters: {kind: bad-payload}}
      - {type: test-malformed, name: array-payload, parameters: {kind: array-payload}}
      - {type: test-static, name: after, parameters: {tag: after}}
  encode:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-many, name: first, parameters: {count: 20}}
      - {type: test-many, name: second, parameters: {count: 20}}
      - {type: test-static, name: third, parameters: {tag: third}}
`

// staticJSON is the wire form of the n-th action when it is test-static's.
func staticJSON(n int, tag string) string {
	return fmt.Sprintf(`{"action_id":"a%d","action_type":"test.static","action_version":"1.0","payload":{"tag":%q}}`, n, tag)
}

func message(id string, actions ...string) string {
	return `{"protocol_version":"0.1","message_id":"` + id + `","actions":[` + strings.Join(actions, ",") + `]}`
}

// TestDispatchRules books through the HTTP API and checks, for every rule
// of DESIGN 6.7, the exact message the simulated worker received over HTTP,
// the answer of the API, and the counters.
func TestDispatchRules(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) { o.PolicyDeadline = 10 * time.Millisecond })
	rules := startSidecarWithConfig(t, testCatalog(t), rulesConfig, func(o *Options) { o.PolicyDeadline = 10 * time.Millisecond })
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)
	registerWorker(t, rules, w)

	many := make([]string, 0, 32)
	for i := 1; i <= 20; i++ {
		many = append(many, staticJSON(i, fmt.Sprint(i)))
	}
	for i := 1; i <= 12; i++ {
		many = append(many, staticJSON(20+i, fmt.Sprint(i)))
	}

	const fetchCopy = `"session":{"id":"s1","turn":2,"final":false},"committed_kv_copy":{"source_worker":"worker-1","source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,22,18446744073709551615]}`
	tests := []struct {
		name, id, role, extra string
		want                  string
		// rules: the booking goes to the sidecar running rulesConfig.
		rules bool
		// counters that must read 1 (or the given count) after the booking
		failures map[string]string // policy -> reason
		overLim  map[string]float64
	}{
		{
			name: "built-ins on a session's middle turn", id: "built-ins", role: "decode", extra: fetchCopy,
			want: message("built-ins",
				`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22,18446744073709551615],"source_control_endpoint":"tcp://10.0.0.7:23280"}}`,
				`{"action_id":"a2","action_type":"kv.retain","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":600.0}}`),
		},
		{
			name: "built-ins on a session's final turn", id: "built-ins-final", role: "decode", extra: `"session":{"id":"s1","turn":3,"final":true}`,
			want: message("built-ins-final",
				`{"action_id":"a1","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true}}`),
		},
		{
			name: "a policy that panics drops only its actions", id: "panics", role: "aggregated",
			want:     message("panics", staticJSON(1, "before"), staticJSON(2, "after")),
			failures: map[string]string{"test-panic": "panic"},
		},
		{
			name: "a policy that errs drops only its actions", id: "errs", role: "decode", rules: true,
			want:     message("errs", staticJSON(1, "before"), staticJSON(2, "after")),
			failures: map[string]string{"test-error": "error"},
		},
		{
			name: "a policy past its deadline drops only its actions", id: "slow", role: "aggregated", rules: true,
			want:     message("slow", staticJSON(1, "before"), staticJSON(2, "after")),
			failures: map[string]string{"test-slow": "deadline"},
		},
		{
			name: "a policy with a malformed action drops all its actions", id: "malformed", role: "prefill", rules: true,
			want: message("malformed", staticJSON(1, "before"), staticJSON(2, "after")),
			failures: map[string]string{
				"empty-type": "malformed", "bad-type": "malformed", "bad-version": "malformed",
				"bad-payload": "malformed", "array-payload": "malformed",
			},
		},
		{
			name: "actions past 32 are dropped and counted", id: "many", role: "encode", rules: true,
			want:    message("many", many...),
			overLim: map[string]float64{"second": 8, "third": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := s
			if tc.rules {
				s = rules
			}
			w.Reset()
			resp := post(t, s, "/v1/bookings", bookingJSON(tc.id, tc.role, "worker-0", tc.extra))
			if resp.status != http.StatusOK {
				t.Fatalf("status %d: %s", resp.status, resp.body)
			}
			if diff := cmp.Diff(tc.want, resp.body); diff != "" {
				t.Errorf("API answer (-want +got):\n%s", diff)
			}
			if got := resp.header.Get(booking.HeaderOutcome); got != "hinted" {
				t.Errorf("%s = %q, want hinted", booking.HeaderOutcome, got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := w.WaitForHints(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("worker received %d hints, want 1", len(got))
			}
			if diff := cmp.Diff(tc.want, string(got[0].Body)); diff != "" {
				t.Errorf("hint received by the worker (-want +got):\n%s", diff)
			}
			for policy, reason := range tc.failures {
				typ := "test-" + strings.TrimPrefix(policy, "test-")
				if tc.id == "malformed" {
					typ = "test-malformed"
				}
				if n := counter(t, s.Metrics, "failures", tc.role, policy, typ, reason); n != 1 {
					t.Errorf("policy_failures_total{policy=%s,reason=%s} = %v, want 1", policy, reason, n)
				}
			}
			for policy, n := range tc.overLim {
				typ := "test-many"
				if policy == "third" {
					typ = "test-static"
				}
				if got := counter(t, s.Metrics, "dropped", tc.role, policy, typ, "over_limit"); got != n {
					t.Errorf("actions_dropped_total{policy=%s,reason=over_limit} = %v, want %v", policy, got, n)
				}
			}
		})
	}
}

// TestNoMessageCases checks the bookings that must not produce a message:
// no actions kept, a worker without router_hint (whose policies must not
// even run), an unknown worker; and the unknown role, which is an error.
func TestNoMessageCases(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)
	// A worker that is registered but does not advertise router_hint.
	plain := startWorker(t, "plain-0")
	if err := s.Workers.Set(workers.SourceAPI, workers.WorkerSpec{ID: "plain-0", HintEndpoint: plain.HintEndpoint()}); err != nil {
		t.Fatal(err)
	}

	t.Run("no actions, no message", func(t *testing.T) {
		// The final-turn booking without a copy on "decode" keeps kv-evict
		// only; a first turn of a session with no copy keeps kv-retain; a
		// request outside any session without a copy keeps nothing.
		resp := post(t, s, "/v1/bookings", bookingJSON("r-empty", "decode", "worker-0", ""))
		if resp.status != http.StatusNoContent || resp.header.Get(booking.HeaderOutcome) != "no_actions" {
			t.Fatalf("got %d %s %q, want 204 no_actions", resp.status, resp.header.Get(booking.HeaderOutcome), resp.body)
		}
		resp = post(t, s, "/v1/bookings", bookingJSON("r-quiet", "encode", "worker-0", ""))
		if resp.status != http.StatusNoContent || resp.header.Get(booking.HeaderOutcome) != "no_actions" {
			t.Fatalf("role with hints: [] got %d %s, want 204 no_actions", resp.status, resp.header.Get(booking.HeaderOutcome))
		}
	})

	t.Run("a worker without router_hint gets nothing and its policies do not run", func(t *testing.T) {
		before := policyRuns.Load()
		resp := post(t, s, "/v1/bookings", bookingJSON("r-plain", "prefill", "plain-0", ""))
		if resp.status != http.StatusNoContent || resp.header.Get(booking.HeaderOutcome) != "not_hint_capable" {
			t.Fatalf("got %d %s, want 204 not_hint_capable", resp.status, resp.header.Get(booking.HeaderOutcome))
		}
		if n := policyRuns.Load() - before; n != 0 {
			t.Errorf("the role's policy ran %d times for a worker without router_hint", n)
		}
		// The same role on a hint-capable worker runs it: the counter works.
		if resp := post(t, s, "/v1/bookings", bookingJSON("r-counted", "prefill", "worker-0", "")); resp.status != http.StatusOK {
			t.Fatalf("capable worker: got %d %s", resp.status, resp.body)
		}
		if n := policyRuns.Load() - before; n != 1 {
			t.Errorf("policy ran %d times for a hint-capable worker, want 1", n)
		}
		if n := counter(t, s.Metrics, "bookings", "prefill", "not_hint_capable"); n != 1 {
			t.Errorf("bookings_total{outcome=not_hint_capable} = %v, want 1", n)
		}
	})

	t.Run("an unknown worker gets nothing", func(t *testing.T) {
		resp := post(t, s, "/v1/bookings", bookingJSON("r-ghost", "prefill", "ghost-0", ""))
		if resp.status != http.StatusNoContent || resp.header.Get(booking.HeaderOutcome) != "unknown_worker" {
			t.Fatalf("got %d %s, want 204 unknown_worker", resp.status, resp.header.Get(booking.HeaderOutcome))
		}
	})

	t.Run("an unknown role is a 422 that names the roles", func(t *testing.T) {
		resp := post(t, s, "/v1/bookings", bookingJSON("r-role", "rerank", "worker-0", ""))
		if resp.status != http.StatusUnprocessableEntity {
			t.Fatalf("got %d, want 422", resp.status)
		}
		for _, want := range []string{`unknown role \"rerank\"`, "aggregated, decode, encode, prefill"} {
			if !strings.Contains(resp.body, want) {
				t.Errorf("answer %s does not say %q", resp.body, want)
			}
		}
	})

	// Only r-counted may have reached a worker. Hints to one worker go out
	// in order, so once it is there any earlier stray one would be too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := w.WaitForHints(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].MessageID != "r-counted" {
		t.Errorf("worker-0 received %d hints (first %q), want only r-counted's", len(got), got[0].MessageID)
	}
	if got := len(plain.Hints()); got != 0 {
		t.Errorf("plain-0 received %d hints, want 0", got)
	}
}

// TestWorkerDown shows that a dead worker costs bookings nothing: they are
// answered at once, the posts fail and are counted, and other workers still
// get their hints.
func TestWorkerDown(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) { o.DeliveryTimeout = 200 * time.Millisecond })
	dead := startWorker(t, "dead-0")
	registerWorker(t, s, dead)
	dead.Close() // the port now refuses connections
	alive := startWorker(t, "alive-0")
	registerWorker(t, s, alive)

	for i := range 5 {
		start := time.Now()
		resp := post(t, s, "/v1/bookings", bookingJSON(fmt.Sprintf("to-dead-%d", i), "prefill", "dead-0", ""))
		if resp.status != http.StatusOK {
			t.Fatalf("booking for a dead worker: %d %s", resp.status, resp.body)
		}
		// Generous for a loaded CI machine; a booking that waited for the
		// failed post would still show.
		if d := time.Since(start); d > 750*time.Millisecond {
			t.Errorf("booking for a dead worker took %v", d)
		}
	}
	resp := post(t, s, "/v1/bookings", bookingJSON("to-alive", "prefill", "alive-0", ""))
	if resp.status != http.StatusOK {
		t.Fatalf("booking for a live worker: %d %s", resp.status, resp.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := alive.WaitForHints(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "five transport errors counted", func(context.Context) error {
		if n := counter(t, s.Metrics, "delivery_errors", "transport"); n != 5 {
			return fmt.Errorf("delivery_errors_total{reason=transport} = %v, want 5", n)
		}
		return nil
	})
}

// TestQueueFull fills a slow worker's queue: the newest hints are dropped
// and counted, the API says which, and bookings never wait.
func TestQueueFull(t *testing.T) {
	const queueSize, bookings = 2, 10
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) {
		o.QueueSize = queueSize
		o.DeliveryTimeout = 5 * time.Second
		o.HintTTL = 10 * time.Second
	})
	w := startWorker(t, "slow-0")
	// A post takes 1.5 s: a booking that waited for delivery would take
	// that long, far over the bound below.
	w.SetBehaviour(http.StatusNoContent, 1500*time.Millisecond)
	registerWorker(t, s, w)

	queued, dropped := 0, 0
	for i := range bookings {
		start := time.Now()
		resp := post(t, s, "/v1/bookings", bookingJSON(fmt.Sprintf("r%d", i), "prefill", "slow-0", ""))
		if resp.status != http.StatusOK {
			t.Fatalf("%d %s", resp.status, resp.body)
		}
		if d := time.Since(start); d > 750*time.Millisecond {
			t.Errorf("booking %d waited %v behind a slow worker", i, d)
		}
		switch resp.header.Get(booking.HeaderQueued) {
		case "true":
			queued++
		case "false":
			dropped++
		}
	}
	// The sender holds one hint in flight and the queue holds queueSize;
	// whether the first is taken before the second arrives is a race, so
	// queueSize or queueSize+1 are queued.
	if queued < queueSize || queued > queueSize+1 || queued+dropped != bookings {
		t.Errorf("queued %d, dropped %d of %d with a queue of %d", queued, dropped, bookings, queueSize)
	}
	if n := counter(t, s.Metrics, "hints_dropped", "queue_full"); int(n) != dropped {
		t.Errorf("hints_dropped_total{reason=queue_full} = %v, want %d", n, dropped)
	}
	// The queued hints arrive, the oldest first; the dropped ones never.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	got, err := w.WaitForHints(ctx, queued)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range got {
		if want := fmt.Sprintf("r%d", i); h.MessageID != want {
			t.Errorf("hint %d is %s, want %s", i, h.MessageID, want)
		}
	}
}
