package router

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/hints"
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
		{"string count", `{"request_id":"r","role":"decode","worker":"w","prompt_tokens":"12","block_size":1}`, 400, "prompt_tokens: got string"},
		{"oversize body", bookingJSON("r", "decode", "worker-0", `"committed_kv_copy":{"block_hashes":[`+strings.Repeat("1,", MaxBookingBytes/2)+`1]}`), 413, "over the 1048576-byte limit"},
		{"long request id", bookingJSON(strings.Repeat("r", MaxRequestIDBytes+1), "decode", "worker-0", ""), 400, "request_id is 257 bytes"},
		{"unknown role", bookingJSON("r", "encode", "worker-0", ""), 422, `unknown role \"encode\"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, s, "/v1/bookings", tc.body)
			if resp.status != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.status, tc.status, resp.body)
			}
			var e errorBody
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
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
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
	var list struct{ Workers []Worker }
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	want := []Worker{{
		WorkerSpec:  WorkerSpec{ID: "w1", Capabilities: []string{"router_hint"}, HintEndpoint: "http://127.0.0.1:1/v1/hints", WorkerType: "decode"},
		HintCapable: true, Source: SourceAPI,
	}}
	if diff := cmp.Diff(want, list.Workers, cmp.AllowUnexported(Worker{}), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".q" }, cmp.Ignore())); diff != "" {
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
	if r := do("GET", "/v1/config", ""); r.status != 200 || r.header.Get(HeaderConfigHash) != hashOf(dispatchConfig) || r.body != dispatchConfig {
		t.Errorf("config: %d %s", r.status, r.header.Get(HeaderConfigHash))
	}
}

// TestGoAPI is the in-process API a router linked with the sidecar uses.
func TestGoAPI(t *testing.T) {
	reg := NewRegistry(nil)
	if err := reg.Set(SourceAPI, WorkerSpec{ID: "w", Capabilities: []string{CapabilityRouterHint}}); err != nil {
		t.Fatal(err)
	}
	d := NewDispatcher(DispatcherOptions{Catalog: testCatalog(t), Workers: reg, Log: testLogger(t)})
	ctx := context.Background()
	if _, err := d.Book(ctx, &Booking{RequestID: "r", Role: "decode", Worker: "w"}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("before a config: %v, want ErrNotReady", err)
	}
	if err := d.Load([]byte(dispatchConfig), "test"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		b    Booking
		want error
	}{
		{Booking{Role: "decode", Worker: "w"}, ErrInvalidBooking},
		{Booking{RequestID: "r", Worker: "w"}, ErrInvalidBooking},
		{Booking{RequestID: "r", Role: "decode"}, ErrInvalidBooking},
		{Booking{RequestID: "r", Role: "decode", Worker: "w", Session: hints.Session{Final: true}}, ErrInvalidBooking},
		{Booking{RequestID: "r", Role: "nope", Worker: "w"}, ErrUnknownRole},
	} {
		if _, err := d.Book(ctx, &tc.b); !errors.Is(err, tc.want) {
			t.Errorf("Book(%+v) = %v, want %v", tc.b, err, tc.want)
		}
	}
	h, err := d.Book(ctx, &Booking{
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
	if h.Outcome != OutcomeHinted || h.Actions != 2 || h.Queued {
		t.Errorf("hint %+v: want hinted, 2 actions, not queued (no delivery)", h)
	}
}

func TestCheckAction(t *testing.T) {
	good := hints.RawPayload([]byte(`{"a":1}`))
	for _, tc := range []struct {
		typ, version string
		payload      hints.Payload
		ok           bool
	}{
		{"kv.fetch", "1.0", good, true},
		{"kv.evict", "2", good, true},
		{"vendor_x.kv-pin", "1.2.3", good, true},
		{"", "1.0", good, false},
		{"Kv.fetch", "1.0", good, false},
		{".kv", "1.0", good, false},
		{`kv"x`, "1.0", good, false},
		{strings.Repeat("k", 65), "1.0", good, false},
		{"kv.fetch", "", good, false},
		{"kv.fetch", "v1", good, false},
		{"kv.fetch", "1..0", good, false},
		{"kv.fetch", ".1", good, false},
		{"kv.fetch", "1.", good, false},
		{"kv.fetch", "1.0", hints.Payload{}, false},
		{"kv.fetch", "1.0", hints.RawPayload([]byte(`{"a":`)), false},
		{"kv.fetch", "1.0", hints.RawPayload([]byte(`"s"`)), false},
	} {
		err := checkAction(&hints.Action{Type: tc.typ, Version: tc.version, Payload: tc.payload})
		if (err == nil) != tc.ok {
			t.Errorf("checkAction(%q, %q, %q) = %v, want ok=%v", tc.typ, tc.version, tc.payload.Bytes(), err, tc.ok)
		}
	}
}

// TestMetricsEndpoint scrapes /metrics over HTTP after a booking and checks
// that every metric the README lists is exposed.
func TestMetricsEndpoint(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)
	if resp := post(t, s, "/v1/bookings", bookingJSON("m1", "panics", "worker-0", "")); resp.status != http.StatusOK {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.WaitForHints(ctx, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
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
			`kvhint_router_bookings_total{outcome="hinted",role="panics"} 1`,
			`kvhint_router_actions_total{policy="before",policy_type="test-static",role="panics"} 1`,
			`kvhint_router_policy_failures_total{policy="test-panic",policy_type="test-panic",reason="panic",role="panics"} 1`,
			`kvhint_router_actions_dropped_total{policy="after",policy_type="test-static",reason="over_limit",role="panics"} 0`,
			`kvhint_router_hint_build_duration_seconds_count{role="panics"} 1`,
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
		} {
			if !strings.Contains(string(b), want+"\n") {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
}

// decodeSeeds are booking bodies the fast decoder must agree with
// encoding/json on: the usual ones, which it decodes itself, and the edge
// cases it hands over to encoding/json.
var decodeSeeds = []string{
	// What routers and the load generator send.
	`{"request_id":"req-1","role":"prefill","worker":"p0","prompt_tokens":4096,"block_size":16,"session":{"id":"sess-1","turn":2,"final":false},"committed_kv_copy":{"source_worker":"p1","source_endpoint":"tcp://p1:23280","block_hashes":[11,22,18446744073709551615]}}`,
	`{"request_id":"req-2","role":"decode","worker":"d0","prompt_tokens":0,"block_size":0,"session":{"id":"s","turn":1,"final":true}}`,
	`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1,"block_size":1}`,
	" \t\r\n{ \"request_id\" : \"r\" ,\n\"role\":\"decode\" , \"worker\":\"w\",\"prompt_tokens\":1 ,\"block_size\" :1 ,\"committed_kv_copy\" : { \"block_hashes\" : [ 1 , 2 ] } } \n\t",
	// Hashes at and past the edges of uint64.
	`{"committed_kv_copy":{"block_hashes":[0,1,9007199254740993,18446744073709551614,18446744073709551615]}}`,
	`{"committed_kv_copy":{"block_hashes":[18446744073709551616]}}`,
	`{"committed_kv_copy":{"block_hashes":[99999999999999999999]}}`,
	`{"committed_kv_copy":{"block_hashes":[184467440737095516150]}}`,
	`{"committed_kv_copy":{"block_hashes":[-1]}}`,
	`{"committed_kv_copy":{"block_hashes":[-0]}}`,
	`{"committed_kv_copy":{"block_hashes":[1.5]}}`,
	`{"committed_kv_copy":{"block_hashes":[1e3]}}`,
	`{"committed_kv_copy":{"block_hashes":[1E+3]}}`,
	`{"committed_kv_copy":{"block_hashes":[01]}}`,
	`{"committed_kv_copy":{"block_hashes":["1"]}}`,
	`{"committed_kv_copy":{"block_hashes":[1,]}}`,
	`{"committed_kv_copy":{"block_hashes":[,1]}}`,
	`{"committed_kv_copy":{"block_hashes":[]}}`,
	`{"committed_kv_copy":{"block_hashes":null}}`,
	`{"committed_kv_copy":{"block_hashes":[null]}}`,
	`{"committed_kv_copy":{}}`,
	`{"committed_kv_copy":null}`,
	`{"committed_kv_copy":{"block_hashes":[1]},"committed_kv_copy":{"source_worker":"b"}}`,
	`{"committed_kv_copy":{"block_hashes":[1],"block_hashes":[2,3]}}`,
	`{"committed_kv_copy":{"block_hashes":{"a":1}}}`,
	`{"committed_kv_copy":[1]}`,
	// Counts.
	`{"prompt_tokens":9223372036854775807,"block_size":-9223372036854775808}`,
	`{"prompt_tokens":9223372036854775808}`,
	`{"block_size":-9223372036854775809}`,
	`{"prompt_tokens":-0}`,
	`{"prompt_tokens":-}`,
	`{"prompt_tokens":1.0}`,
	`{"prompt_tokens":1e2}`,
	`{"prompt_tokens":"12"}`,
	`{"prompt_tokens":null}`,
	`{"prompt_tokens":true}`,
	`{"prompt_tokens":1,"prompt_tokens":2}`,
	`{"session":{"id":"s","turn":-3,"final":true}}`,
	`{"session":{"id":"s","final":tru}}`,
	`{"session":{"id":"s","final":truex}}`,
	`{"session":{"id":"s","final":1}}`,
	`{"session":{"id":"a","turn":2},"session":{"id":"b"}}`,
	`{"session":{"id":"a","id":"b"}}`,
	`{"session":{}}`,
	`{"session":null}`,
	`{"session":{"id":"s","extra":1}}`,
	// Keys: spelling, case, unknown, duplicate.
	`{"Request_ID":"r","ROLE":"decode"}`,
	`{"request_id":"a","request_id":"b"}`,
	`{"request_id":"a","Request_Id":"b"}`,
	`{"promt":1}`,
	`{"request_id":"r","":1}`,
	`{"request\u005fid":"r"}`,
	// Strings: escapes, Unicode, invalid UTF-8, control characters.
	`{"request_id":"quote\"and\\newline\n"}`,
	`{"request_id":"\u00e9\ud83d\ude00"}`,
	`{"request_id":"\ud800"}`,
	"{\"request_id\":\"h\u00e9llo \U0001F600\"}",
	"{\"request_id\":\"bad \xff utf8\"}",
	"{\"request_id\":\"surrogate \xed\xa0\x80\"}",
	"{\"request_id\":\"tab\there\"}",
	"{\"request_id\":\"del\x7f\"}",
	`{"request_id":null}`,
	`{"request_id":1}`,
	`{"request_id":"unterminated}`,
	// Shapes around the object.
	``,
	` `,
	`{}`,
	`[1,2]`,
	`"s"`,
	`null`,
	`{`,
	`{"request_id":"r",}`,
	`{,"request_id":"r"}`,
	`{"request_id" "r"}`,
	`{"request_id":"r"}{}`,
	`{"request_id":"r"}}`,
	`{"request_id":"r"}]`,
	`{"request_id":"r"} x`,
	`{"request_id":"r"}` + "\x00",
	`{"request_id":"r"`,
}

// refDecode is the reference: encoding/json as decodeJSON runs it.
func refDecode(body []byte) (bookingRequest, int, string) {
	var req bookingRequest
	status, err := decodeBytes(body, &req)
	if err != nil {
		return req, status, err.Error()
	}
	return req, 0, ""
}

// checkFastDecode fails when the fast decoder accepts a body encoding/json
// refuses or decodes differently; it reports whether the fast path took it.
func checkFastDecode(t *testing.T, body []byte) bool {
	t.Helper()
	var got bookingRequest
	var st fastBookingState
	if !fastDecodeBooking(body, &got, &st) {
		return false
	}
	want, _, err := refDecode(body)
	if err != "" {
		t.Fatalf("fast decoder accepted %q, which encoding/json refuses: %s", body, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("fast decoder on %q (-encoding/json +fast):\n%s", body, diff)
	}
	return true
}

// decodeOverHTTP runs decode on body as the handler does.
func decodeOverHTTP(body []byte, decode func(http.ResponseWriter, *http.Request) (int, error)) (int, string) {
	r := httptest.NewRequest(http.MethodPost, "/v1/bookings", bytes.NewReader(body))
	status, err := decode(httptest.NewRecorder(), r)
	if err != nil {
		return status, err.Error()
	}
	return status, ""
}

// checkDecodeBooking: the handler's decodeBooking answers every body as
// decodeJSON does, status, error message and value.
func checkDecodeBooking(t *testing.T, body []byte) {
	t.Helper()
	var got, want bookingRequest
	gotStatus, gotErr := decodeOverHTTP(body, func(w http.ResponseWriter, r *http.Request) (int, error) { return decodeBooking(w, r, &got) })
	wantStatus, wantErr := decodeOverHTTP(body, func(w http.ResponseWriter, r *http.Request) (int, error) {
		return decodeJSON(w, r, MaxBookingBytes, &want)
	})
	if gotStatus != wantStatus || gotErr != wantErr {
		t.Fatalf("decodeBooking(%q) = %d %q, decodeJSON %d %q", body, gotStatus, gotErr, wantStatus, wantErr)
	}
	if wantErr == "" {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decodeBooking(%q) (-decodeJSON +decodeBooking):\n%s", body, diff)
		}
	}
}

// TestFastDecodeBooking holds the fast decoder to encoding/json on the
// seeds and on every single-byte deletion, duplication and substitution
// of them, and checks that it does take the usual bookings itself.
func TestFastDecodeBooking(t *testing.T) {
	for i, s := range decodeSeeds[:5] {
		if !checkFastDecode(t, []byte(s)) {
			t.Errorf("seed %d went to encoding/json; the fast path should take it: %s", i, s)
		}
	}
	subst := []byte(` "\,:{}[]-+.0159eEtfnu` + "\t\x00\x7f\xc3\xff")
	fast, n := 0, 0
	for _, s := range decodeSeeds {
		b := []byte(s)
		try := func(m []byte) {
			n++
			if checkFastDecode(t, m) {
				fast++
			}
			checkDecodeBooking(t, m)
		}
		try(b)
		for i := range b {
			try(append(append([]byte{}, b[:i]...), b[i+1:]...))
			try(append(append([]byte{}, b[:i+1]...), b[i:]...))
			for _, c := range subst {
				if c != b[i] {
					m := append([]byte{}, b...)
					m[i] = c
					try(m)
				}
			}
		}
	}
	t.Logf("%d bodies, %d decoded by the fast path", n, fast)
}

// TestDecodeBookingOversize: a body over the limit gets decodeJSON's 413,
// whichever path would have decoded it.
func TestDecodeBookingOversize(t *testing.T) {
	body := []byte(`{"committed_kv_copy":{"block_hashes":[` + strings.Repeat("1,", MaxBookingBytes/2) + `1]}}`)
	checkDecodeBooking(t, body)
	if status, err := decodeOverHTTP(body, func(w http.ResponseWriter, r *http.Request) (int, error) {
		var req bookingRequest
		return decodeBooking(w, r, &req)
	}); status != http.StatusRequestEntityTooLarge || !strings.Contains(err, "over the 1048576-byte limit") {
		t.Errorf("oversize: %d %s", status, err)
	}
	// Exactly at the limit is fine.
	at := []byte(`{"request_id":"` + strings.Repeat("r", MaxBookingBytes-len(`{"request_id":""}`)) + `"}`)
	checkDecodeBooking(t, at)
	if !checkFastDecode(t, at) {
		t.Error("a body of exactly the limit went to encoding/json")
	}
}

// FuzzDecodeBooking: whatever the body, decodeBooking answers as decodeJSON
// does, and the fast decoder never accepts what encoding/json refuses or
// decodes it differently.
func FuzzDecodeBooking(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
		checkDecodeBooking(t, body)
	})
}

// BenchmarkDecodeBooking compares the fast decoder with encoding/json on
// a booking with 256 hashes.
func BenchmarkDecodeBooking(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"request_id":"req-123456","role":"prefill","worker":"prefill-7","prompt_tokens":4096,"block_size":16,"session":{"id":"sess-42","turn":3,"final":false},"committed_kv_copy":{"source_worker":"prefill-3","source_endpoint":"tcp://prefill-3:23280","block_hashes":[`)
	for i := range 256 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, uint64(i)*0x9e3779b97f4a7c15)
	}
	sb.WriteString(`]}}`)
	body := []byte(sb.String())
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req bookingRequest
			var st fastBookingState
			if !fastDecodeBooking(body, &req, &st) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req bookingRequest
			if _, err := decodeBytes(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseEightDigits holds the eight-at-a-time digit parser to strconv.
func TestParseEightDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		var b [8]byte
		for j := range b {
			b[j] = '0' + byte(rng.IntN(10))
			if i%7 == 0 && rng.IntN(8) == 0 {
				b[j] = byte(rng.IntN(256)) // sometimes not a digit
			}
		}
		v := binary.LittleEndian.Uint64(b[:])
		want, err := strconv.ParseUint(string(b[:]), 10, 64)
		isDigits := err == nil && !strings.ContainsAny(string(b[:]), "+-")
		if eightDigits(v) != isDigits {
			t.Fatalf("eightDigits(%q) = %v", b, !isDigits)
		}
		if isDigits && parseEightDigits(v) != want {
			t.Fatalf("parseEightDigits(%q) = %d, want %d", b, parseEightDigits(v), want)
		}
	}
	// Every hash length from 1 to 21 digits, at and around the uint64 limit.
	for _, s := range []string{"0", "7", "10", "12345678", "123456789", "1234567890123456", "12345678901234567",
		"9999999999999999999", "10000000000000000000", "18446744073709551615", "18446744073709551616",
		"18446744073709551619", "18446744073709551620", "99999999999999999999", "100000000000000000000"} {
		body := []byte(`{"committed_kv_copy":{"block_hashes":[` + s + `]}}`)
		fits := len(s) < 20 || (len(s) == 20 && s <= "18446744073709551615")
		if checkFastDecode(t, body) != fits {
			t.Errorf("hash %s: fast path took it: %v, want %v", s, !fits, fits)
		}
	}
}
