package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// TestBookingAPIErrors checks that bad bookings get a 4xx that says what to
// fix, and reach no worker.
func TestBookingAPIErrors(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)

	tests := []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"missing fields", `{"role":"decode"}`, 400, "missing required field(s): request_id, worker, prompt_tokens, block_size"},
		{"empty body", ``, 400, "body is empty"},
		{"bad JSON", `{"request_id": "r1",`, 400, "not valid JSON"},
		{"not an object", `[1,2]`, 400, "body is a JSON array; send a JSON object"},
		{"unknown field", `{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1,"block_size":1,"promt":1}`, 400, `unknown field \"promt\"`},
		{"trailing data", bookingJSON("r", "decode", "worker-0", "") + `{}`, 400, "data after the JSON object"},
		{"negative block hash", bookingJSON("r", "decode", "worker-0", `"committed_kv_copy":{"block_hashes":[-1]}`), 400, "committed_kv_copy.block_hashes: got number -1, want an unsigned 64-bit integer"},
		{"block hash past 2^64", bookingJSON("r", "decode", "worker-0", `"committed_kv_copy":{"block_hashes":[18446744073709551616]}`), 400, "want an unsigned 64-bit integer"},
		{"fractional block hash", bookingJSON("r", "decode", "worker-0", `"committed_kv_copy":{"block_hashes":[1.5]}`), 400, "want an unsigned 64-bit integer"},
		{"empty copy", bookingJSON("r", "decode", "worker-0", `"committed_kv_copy":{"block_hashes":[]}`), 400, "block_hashes is empty"},
		{"session without id", bookingJSON("r", "decode", "worker-0", `"session":{"turn":2}`), 400, "session.id is required"},
		{"negative prompt", `{"request_id":"r","role":"decode","worker":"w","prompt_tokens":-1,"block_size":1}`, 400, "prompt_tokens is -1"},
		{"zero block size", `{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1,"block_size":0}`, 400, "block_size is 0; a KV block holds at least 1 token"},
		{"turn 0 in a session", bookingJSON("r", "decode", "worker-0", `"session":{"id":"s","turn":0}`), 400, "session.turn is 0; turns count from 1"},
		{"string count", `{"request_id":"r","role":"decode","worker":"w","prompt_tokens":"12","block_size":1}`, 400, "prompt_tokens: got string"},
		{"oversize body", bookingJSON("r", "decode", "worker-0", `"committed_kv_copy":{"block_hashes":[`+strings.Repeat("1,", dispatch.DefaultMaxBookingBytes/2)+`1]}`), 413, "over the 1048576-byte limit"},
		{"long request id", bookingJSON(strings.Repeat("r", dispatch.MaxRequestIDBytes+1), "decode", "worker-0", ""), 400, "request_id is 257 bytes"},
		{"unknown role", bookingJSON("r", "rerank", "worker-0", ""), 422, `unknown role \"rerank\"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, s, "/v1/bookings", tc.body)
			if resp.status != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.status, tc.status, resp.body)
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(resp.body), &e); err != nil {
				t.Fatalf("error answer is not JSON: %v: %s", err, resp.body)
			}
			if !strings.Contains(e.Error, strings.ReplaceAll(tc.want, `\"`, `"`)) {
				t.Errorf("error %q does not say %q", e.Error, tc.want)
			}
		})
	}
	if n := len(w.Hints()); n != 0 {
		t.Errorf("bad bookings sent %d hints", n)
	}
}

// TestBlockHashesKeepFullPrecision: hashes near 2^64 go through the API and
// reach the worker unchanged; a float64 would round them.
func TestBlockHashesKeepFullPrecision(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)
	hashes := []uint64{18446744073709551615, 18446744073709551557, 9007199254740993, 0}
	body := bookingJSON("precise", "decode", "worker-0", `"committed_kv_copy":{"source_worker":"b","source_endpoint":"tcp://b:1","block_hashes":[18446744073709551615,18446744073709551557,9007199254740993,0]}`)
	if resp := post(t, s, "/v1/bookings", body); resp.status != http.StatusOK {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := w.WaitForHints(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Actions []struct {
			Payload struct {
				BlockHashes []uint64 `json:"block_hashes"`
			} `json:"payload"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(got[0].Body, &m); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hashes, m.Actions[0].Payload.BlockHashes); diff != "" {
		t.Errorf("block hashes (-sent +received):\n%s", diff)
	}
}

// TestWorkersAPI registers, lists, reads and removes a worker.
func TestWorkersAPI(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	do := func(method, path, body string) response {
		req, err := http.NewRequest(method, "http://"+s.BookingAddr()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return roundTrip(t, http.DefaultClient, req)
	}
	if r := do("PUT", "/v1/workers/w1", `{"capabilities":["router_hint"],"hint_endpoint":"ftp://x"}`); r.status != 400 || !strings.Contains(r.body, "absolute http or https URL") {
		t.Errorf("bad endpoint: %d %s", r.status, r.body)
	}
	if r := do("PUT", "/v1/workers/w1", `{"id":"w2"}`); r.status != 400 {
		t.Errorf("mismatched id: %d %s", r.status, r.body)
	}
	if r := do("PUT", "/v1/workers/w1", `{"capabilities":["router_hint"],"hint_endpoint":"http://127.0.0.1:1/v1/hints","worker_type":"decode"}`); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	r := do("GET", "/v1/workers", "")
	var list struct{ Workers []workers.Worker }
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	want := []workers.Worker{{
		WorkerSpec: workers.WorkerSpec{ID: "w1", Capabilities: []string{"router_hint"}, HintEndpoint: "http://127.0.0.1:1/v1/hints", WorkerType: "decode"},
		Capable:    true, Source: workers.SourceAPI,
	}}
	if diff := cmp.Diff(want, list.Workers, cmp.AllowUnexported(workers.Worker{}), cmp.FilterPath(func(p cmp.Path) bool { s := p.Last().String(); return s == ".q" || s == ".delivery" }, cmp.Ignore())); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if r := do("GET", "/v1/workers/w1", ""); r.status != 200 {
		t.Errorf("get: %d", r.status)
	}
	if r := do("DELETE", "/v1/workers/w1", ""); r.status != 204 {
		t.Errorf("delete: %d", r.status)
	}
	if r := do("GET", "/v1/workers/w1", ""); r.status != 404 {
		t.Errorf("get after delete: %d", r.status)
	}
	if r := do("GET", "/v1/config", ""); r.status != 200 || r.header.Get(booking.HeaderConfigHash) != hashOf(dispatchConfig) || r.body != dispatchConfig {
		t.Errorf("config: %d %s", r.status, r.header.Get(booking.HeaderConfigHash))
	}
}

// TestGoAPI is the in-process API a router linked with the sidecar uses.
func TestGoAPI(t *testing.T) {
	reg := workers.NewRegistry(nil)
	if err := reg.Set(workers.SourceAPI, workers.WorkerSpec{ID: "w", Capabilities: []string{dispatch.CapabilityRouterHint}}); err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: testCatalog(t), Workers: reg, Log: testLogger(t)})
	ctx := context.Background()
	if _, err := d.Book(ctx, &dispatch.Booking{RequestID: "r", Role: "decode", Worker: "w"}); !errors.Is(err, dispatch.ErrNotReady) {
		t.Fatalf("before a config: %v, want ErrNotReady", err)
	}
	if err := d.Load([]byte(dispatchConfig), "test"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		b    dispatch.Booking
		want error
	}{
		{dispatch.Booking{Role: "decode", Worker: "w"}, dispatch.ErrInvalidBooking},
		{dispatch.Booking{RequestID: "r", Worker: "w"}, dispatch.ErrInvalidBooking},
		{dispatch.Booking{RequestID: "r", Role: "decode"}, dispatch.ErrInvalidBooking},
		{dispatch.Booking{RequestID: "r", Role: "decode", Worker: "w", Session: hints.Session{Final: true}}, dispatch.ErrInvalidBooking},
		{dispatch.Booking{RequestID: "r", Role: "nope", Worker: "w"}, dispatch.ErrUnknownRole},
	} {
		if _, err := d.Book(ctx, &tc.b); !errors.Is(err, tc.want) {
			t.Errorf("Book(%+v) = %v, want %v", tc.b, err, tc.want)
		}
	}
	h, err := d.Book(ctx, &dispatch.Booking{
		RequestID: `quote"and\newline`, Role: "decode", Worker: "w", PromptTokens: 100, BlockSize: 16,
		Session: hints.Session{ID: "s", Turn: 1},
		KVCopy:  &hints.CommittedCopy{SourceWorker: "b", SourceEndpoint: "tcp://b:1", BlockHashes: []uint64{7}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"protocol_version":"0.1","message_id":"quote\"and\\newline","actions":[` +
		`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[7],"source_control_endpoint":"tcp://b:1"}},` +
		`{"action_id":"a2","action_type":"kv.retain","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":600.0}}]}`
	if diff := cmp.Diff(want, string(h.Message)); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}
	if !json.Valid(h.Message) {
		t.Error("message is not valid JSON")
	}
	if h.Outcome != dispatch.OutcomeHinted || h.Actions != 2 || h.Queued {
		t.Errorf("hint %+v: want hinted, 2 actions, not queued (no delivery)", h)
	}
}

// TestMetricsEndpoint scrapes /metrics over HTTP after a booking and checks
// that every metric docs/sidecar.md lists is exposed.
func TestMetricsEndpoint(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)
	if resp := post(t, s, "/v1/bookings", bookingJSON("m1", "aggregated", "worker-0", "")); resp.status != http.StatusOK {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.WaitForHints(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the metrics answered", func(context.Context) error {
		resp, err := http.Get("http://" + s.OpsAddr() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		for _, want := range []string{
			`kvhint_router_bookings_total{outcome="hinted",role="aggregated"} 1`,
			`kvhint_router_actions_total{policy="before",policy_type="test-static",role="aggregated"} 1`,
			`kvhint_router_policy_failures_total{policy="test-panic",policy_type="test-panic",reason="panic",role="aggregated"} 1`,
			`kvhint_router_actions_dropped_total{policy="after",policy_type="test-static",reason="over_limit",role="aggregated"} 0`,
			`kvhint_router_hint_build_duration_seconds_count{role="aggregated"} 1`,
			`kvhint_router_hints_sent_total 1`,
			`kvhint_router_hints_dropped_total{reason="queue_full"} 0`,
			`kvhint_router_delivery_errors_total{reason="timeout"} 0`,
			`kvhint_router_delivery_duration_seconds_count 1`,
			`kvhint_router_config_info{hash="` + hashOf(dispatchConfig) + `"} 1`,
			`kvhint_router_config_last_reload_successful 1`,
			`kvhint_router_config_reloads_total{result="success"} 1`,
			`kvhint_router_workers 1`,
			`kvhint_router_hint_capable_workers 1`,
			`kvhint_router_delivery_queued_hints 0`,
			`kvhint_router_booking_errors_total{reason="unknown_role"} 0`,
			`kvhint_router_bookings_refused_total{reason="memory_budget"} 0`,
			`kvhint_router_booking_memory_bytes 0`,
			`kvhint_router_delivery_errors_total{reason="connection_limit"} 0`,
		} {
			if !strings.Contains(string(b), want+"\n") {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
}

// TestBookingAPIRoutes: the booking listener matches paths and methods as
// net/http's ServeMux did before it moved to fasthttp, and answers what
// matches nothing as it did: 405 with the allowed methods, 404, and a 307
// to the clean form of a path that is not clean.
func TestBookingAPIRoutes(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	registerWorker(t, s, startWorker(t, "w"))
	type answer struct {
		Status               int
		Allow, Location      string
		ContentType, Nosniff string
		Body                 string
	}
	notFound := answer{Status: 404, ContentType: "text/plain; charset=utf-8", Nosniff: "nosniff", Body: "404 page not found\n"}
	notAllowed := func(allow string) answer {
		return answer{Status: 405, Allow: allow, ContentType: "text/plain; charset=utf-8", Nosniff: "nosniff", Body: "Method Not Allowed\n"}
	}
	unknownWorker := func(id string) answer {
		return answer{Status: 404, ContentType: "application/json", Body: fmt.Sprintf("{\n  \"error\": \"worker \\\"%s\\\" is not registered\"\n}\n", id)}
	}
	tests := []struct {
		method, path string
		want         answer
	}{
		{"GET", "/v1/bookings", notAllowed("POST")},
		{"HEAD", "/v1/bookings", notAllowed("POST")},
		{"PUT", "/v1/workers", notAllowed("GET, HEAD")},
		{"POST", "/v1/workers/w", notAllowed("DELETE, GET, HEAD, PUT")},
		{"PATCH", "/v1/config", notAllowed("GET, HEAD")},
		{"get", "/v1/workers", notAllowed("GET, HEAD")},
		{"HEAD", "/v1/workers", answer{Status: 200, ContentType: "application/json"}},
		{"GET", "/v1/workers/nope", unknownWorker("nope")},
		{"GET", "/v1/workers/a%2Fb", unknownWorker("a/b")},
		{"GET", "/v1/workers/a%20b", unknownWorker("a b")},
		{"GET", "/v1/%77orkers/nope", unknownWorker("nope")},
		{"GET", "/v1/workers/nope?x=1", unknownWorker("nope")},
		{"GET", "/v1/workers/", notFound},
		{"GET", "/v1/workers/a/b", notFound},
		{"GET", "/v1/bookings/", notFound},
		{"GET", "/v2/workers", notFound},
		{"POST", "/v1/bookingsx", notFound},
		{"GET", "/", notFound},
		{"GET", "/v1//workers?x=1", answer{Status: 307, Location: "/v1/workers?x=1", ContentType: "text/html; charset=utf-8",
			Body: "<a href=\"/v1/workers?x=1\">Temporary Redirect</a>.\n\n"}},
		{"POST", "/v1/./bookings", answer{Status: 307, Location: "/v1/bookings"}},
		{"GET", "/v1/workers/%zz", answer{Status: 400, ContentType: "application/json",
			Body: "{\n  \"error\": \"malformed request: path: invalid URL escape \\\"%zz\\\"\"\n}\n"}},
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			// The path goes on the wire as written: no client cleaning or
			// re-escaping.
			req, err := http.NewRequest(tc.method, "http://"+s.BookingAddr()+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = tc.path
			r := roundTrip(t, c, req)
			if tc.method == "HEAD" {
				tc.want.Body = "" // the GET answer's head only
			}
			got := answer{Status: r.status, Allow: r.header.Get("Allow"), Location: r.header.Get("Location"),
				ContentType: r.header.Get("Content-Type"), Nosniff: r.header.Get("X-Content-Type-Options"), Body: r.body}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if n, _ := strconv.Atoi(r.header.Get("Content-Length")); tc.method == "HEAD" && n <= 0 {
				t.Errorf("HEAD: Content-Length %q, want the GET answer's", r.header.Get("Content-Length"))
			}
			if srv := r.header.Get("Server"); srv != "" {
				t.Errorf("Server header %q: the sidecar does not say what it runs", srv)
			}
		})
	}
}
