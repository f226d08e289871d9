package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// longConfig is a prefill role that sends the committed copy whole
// (kvcr's default kv-fetch) and evicts on a final turn, next to a role
// whose kv-fetch caps the copy (aggregated), and one with a custom policy
// that sleeps (encode).
const longConfig = `
worker_selection:
  prefill:
    type: kvcr
    hints:
      - type: kv-fetch
      - type: kv-evict
  aggregated:
    type: kvcr
    hints:
      - {type: kv-fetch, parameters: {max_blocks: 1000}}
  encode:
    type: kvcr
    hints:
      - type: kv-fetch
      - {type: test-slow, parameters: {sleep: 30ms}}
`

// randomHashes are n random 64-bit block hashes, as routers' are: most
// print as 19 or 20 digits.
func randomHashes(n int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]uint64, n)
	for i := range out {
		out[i] = rng.Uint64()
	}
	return out
}

// copyJSON is a committed_kv_copy member with the given hashes.
func copyJSON(source, endpoint string, hashes []uint64) string {
	var b strings.Builder
	b.WriteString(`"committed_kv_copy":{"source_worker":"` + source + `"`)
	if endpoint != "" {
		b.WriteString(`,"source_endpoint":"` + endpoint + `"`)
	}
	b.WriteString(`,"block_hashes":[`)
	for i, h := range hashes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(h, 10))
	}
	b.WriteString("]}")
	return b.String()
}

// fetchOf decodes a hint and returns its kv.fetch payload, and the action
// types in order.
func fetchOf(t *testing.T, msg []byte) (hashes []uint64, endpoint string, types []string) {
	t.Helper()
	var m struct {
		Actions []struct {
			Type    string          `json:"action_type"`
			Payload json.RawMessage `json:"payload"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("hint is not JSON: %v", err)
	}
	for _, a := range m.Actions {
		types = append(types, a.Type)
		if a.Type != "kv.fetch" || hashes != nil {
			continue
		}
		var p struct {
			BlockHashes []uint64 `json:"block_hashes"`
			Endpoint    string   `json:"source_control_endpoint"`
		}
		if err := json.Unmarshal(a.Payload, &p); err != nil {
			t.Fatalf("kv.fetch payload: %v", err)
		}
		hashes, endpoint = p.BlockHashes, p.Endpoint
	}
	return hashes, endpoint, types
}

// TestLongPromptsOverHTTP: a booking the API accepts gets its kv.fetch
// whole, up to a 1M-token prompt at block size 32, over real HTTP to a
// real worker; a copy too large to carry is refused up front with 413
// naming the limit and the flag; raising the flag carries it.
func TestLongPromptsOverHTTP(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), longConfig, nil)
	w := startWorker(t, "prefill-0")
	registerWorker(t, s, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sent := 0
	for _, n := range []int{64, 1024, 8192, 32768} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			hashes := randomHashes(n, uint64(n))
			body := bookingJSON(fmt.Sprintf("long-%d", n), "prefill", "prefill-0",
				`"session":{"id":"s","turn":1,"final":true},`+copyJSON("prefill-1", "tcp://10.0.0.7:23280", hashes))
			resp := post(t, s, "/v1/bookings", body)
			if resp.status != http.StatusOK {
				t.Fatalf("%d blocks: status %d (%s), outcome %s", n, resp.status, resp.body, resp.header.Get(booking.HeaderOutcome))
			}
			got, ep, types := fetchOf(t, []byte(resp.body))
			if diff := cmp.Diff([]string{"kv.fetch", "kv.evict"}, types); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if !cmp.Equal(hashes, got) || ep != "tcp://10.0.0.7:23280" {
				t.Fatalf("%d blocks: the answer's kv.fetch has %d hashes (equal: %v) and endpoint %q", n, len(got), cmp.Equal(hashes, got), ep)
			}
			sent++
			received, err := w.WaitForHints(ctx, sent)
			if err != nil {
				t.Fatal(err)
			}
			if string(received[sent-1].Body) != resp.body {
				t.Errorf("%d blocks: the worker received other bytes than the answer", n)
			}
		})
	}

	t.Run("max_blocks still caps", func(t *testing.T) {
		hashes := randomHashes(8192, 3)
		resp := post(t, s, "/v1/bookings", bookingJSON("capped", "aggregated", "prefill-0", copyJSON("prefill-1", "tcp://p1:1", hashes)))
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		if got, _, _ := fetchOf(t, []byte(resp.body)); !cmp.Equal(hashes[:1000], got) {
			t.Errorf("capped fetch has %d hashes, want the first 1000", len(got))
		}
	})

	t.Run("a sleeping custom policy still loses its actions", func(t *testing.T) {
		hashes := randomHashes(8192, 4)
		resp := post(t, s, "/v1/bookings", bookingJSON("sleepy", "encode", "prefill-0", copyJSON("prefill-1", "tcp://p1:1", hashes)))
		if resp.status != http.StatusOK {
			t.Fatalf("status %d: %s", resp.status, resp.body)
		}
		got, _, types := fetchOf(t, []byte(resp.body))
		if diff := cmp.Diff([]string{"kv.fetch"}, types); diff != "" || len(got) != 8192 {
			t.Errorf("actions (-want +got), %d hashes:\n%s", len(got), diff)
		}
		if n := counter(t, s.Metrics, "failures", "encode", "test-slow", "test-slow", "deadline"); n != 1 {
			t.Errorf("test-slow deadline failures = %v, want 1", n)
		}
		if n := counter(t, s.Metrics, "failures", "encode", "kv-fetch", "kv-fetch", "deadline"); n != 0 {
			t.Errorf("kv-fetch deadline failures = %v, want 0", n)
		}
	})

	t.Run("too large: 413 up front, naming the limit and the flag", func(t *testing.T) {
		// 60,000 hashes of 20 digits: about 1.26 MB, over the 1 MiB default.
		hashes := randomHashes(60000, 5)
		for i := range hashes {
			hashes[i] |= 1 << 63
		}
		resp := post(t, s, "/v1/bookings", bookingJSON("huge", "prefill", "prefill-0", copyJSON("prefill-1", "tcp://p1:1", hashes)))
		if resp.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413: %s", resp.status, resp.body)
		}
		for _, want := range []string{"over the 1048576-byte limit", "--max-booking-bytes"} {
			if !strings.Contains(resp.body, want) {
				t.Errorf("413 answer %q does not say %q", resp.body, want)
			}
		}
		if n := gathered(t, s.Metrics, "kvhint_router_booking_errors_total", map[string]string{"reason": "too_large"}); n != 1 {
			t.Errorf("too_large booking errors = %v, want 1", n)
		}
	})

	if n := counter(t, s.Metrics, "dropped", "prefill", "kv-fetch", "kv-fetch", "malformed"); n != 0 {
		t.Errorf("kv-fetch actions dropped as malformed: %v", n)
	}
}

// TestMaxBookingBytesFlag: raising the booking limit raises the payload
// limit with it: a copy of 60,000 20-digit hashes is carried whole.
func TestMaxBookingBytesFlag(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), longConfig, func(o *Options) { o.MaxBookingBytes = 2 << 20 })
	w := startWorker(t, "prefill-0")
	registerWorker(t, s, w)
	hashes := randomHashes(60000, 5)
	for i := range hashes {
		hashes[i] |= 1 << 63
	}
	resp := post(t, s, "/v1/bookings", bookingJSON("huge", "prefill", "prefill-0", copyJSON("prefill-1", "tcp://p1:1", hashes)))
	if resp.status != http.StatusOK {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	if got, _, _ := fetchOf(t, []byte(resp.body)); !cmp.Equal(hashes, got) {
		t.Errorf("fetch has %d hashes, want all 60000", len(got))
	}
}

// TestGoAPITooLarge: an in-process router's copy over the booking limit is
// refused up front, never accepted and stripped.
func TestGoAPITooLarge(t *testing.T) {
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: testCatalog(t), MaxBookingBytes: 64 << 10, Workers: dispatch.StaticWorkers{"p0": true}})
	if err := d.Load([]byte(longConfig), "test"); err != nil {
		t.Fatal(err)
	}
	hashes := randomHashes(4000, 1) // about 77 KB in decimal
	big := dispatch.Booking{RequestID: "r", Role: "prefill", Worker: "p0"}
	big.KVCopy = &hints.CommittedCopy{SourceEndpoint: "tcp://p1:1", BlockHashes: hashes}
	_, err := d.Build(context.Background(), &big)
	if !errors.Is(err, dispatch.ErrBookingTooLarge) || !errors.Is(err, dispatch.ErrInvalidBooking) || !strings.Contains(err.Error(), "65536") {
		t.Fatalf("Build = %v, want ErrBookingTooLarge naming the limit", err)
	}
	big.KVCopy.BlockHashes = hashes[:3000] // about 58 KB: fits, and is sent whole
	h, err := d.Build(context.Background(), &big)
	if err != nil || h.Outcome != dispatch.OutcomeHinted {
		t.Fatalf("Build = %v, %v", h.Outcome, err)
	}
	if got, _, _ := fetchOf(t, h.Message); len(got) != 3000 {
		t.Errorf("fetch has %d hashes, want 3000", len(got))
	}
}

// TestSourceEndpointsFromRegistry: a booking may name only the source
// worker and rank; the endpoint comes from what the source advertises. An
// unknown source or rank drops only the fetch, counted by reason.
func TestSourceEndpointsFromRegistry(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), longConfig, nil)
	w := startWorker(t, "prefill-0")
	registerWorker(t, s, w)
	put := func(id, body string) response {
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/"+id, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return response{status: resp.StatusCode}
	}
	if r := put("prefill-1", `{"worker_type":"prefill","source_control_endpoints":{"0":"tcp://10.0.0.7:23280","1":"tcp://10.0.0.7:23281"}}`); r.status != 200 {
		t.Fatalf("PUT source worker: %d", r.status)
	}
	hashes := randomHashes(8192, 9)
	final := `"session":{"id":"s","turn":2,"final":true},`
	for _, tc := range []struct {
		name, copy string
		endpoint   string
		types      []string
		dropped    string
	}{
		{"rank 0 by default", copyJSON("prefill-1", "", hashes), "tcp://10.0.0.7:23280", []string{"kv.fetch", "kv.evict"}, ""},
		{"rank 1", strings.Replace(copyJSON("prefill-1", "", hashes), `"block_hashes"`, `"source_rank":1,"block_hashes"`, 1), "tcp://10.0.0.7:23281", []string{"kv.fetch", "kv.evict"}, ""},
		{"the booking's endpoint wins", copyJSON("prefill-1", "tcp://given:1", hashes), "tcp://given:1", []string{"kv.fetch", "kv.evict"}, ""},
		{"unknown rank", strings.Replace(copyJSON("prefill-1", "", hashes), `"block_hashes"`, `"source_rank":7,"block_hashes"`, 1), "", []string{"kv.evict"}, "unknown_source_rank"},
		{"unknown source", copyJSON("prefill-9", "", hashes), "", []string{"kv.evict"}, "unknown_source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, s, "/v1/bookings", bookingJSON("r-"+tc.name, "prefill", "prefill-0", final+tc.copy))
			if resp.status != http.StatusOK {
				t.Fatalf("status %d: %s", resp.status, resp.body)
			}
			got, ep, types := fetchOf(t, []byte(resp.body))
			if diff := cmp.Diff(tc.types, types); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if tc.endpoint != "" && (ep != tc.endpoint || len(got) != len(hashes)) {
				t.Errorf("endpoint %q with %d hashes, want %q with %d", ep, len(got), tc.endpoint, len(hashes))
			}
			if h := resp.header.Get(booking.HeaderCopyDropped); h != tc.dropped {
				t.Errorf("%s = %q, want %q", booking.HeaderCopyDropped, h, tc.dropped)
			}
		})
	}
	for _, reason := range []string{"unknown_source", "unknown_source_rank"} {
		if n := gathered(t, s.Metrics, "kvhint_router_kv_copies_dropped_total", map[string]string{"role": "prefill", "reason": reason}); n != 1 {
			t.Errorf("copies dropped for %s = %v, want 1", reason, n)
		}
	}
}

// TestWorkerTypeValidated: a worker type other than aggregated, prefill or
// decode is refused wherever a worker is registered.
func TestWorkerTypeValidated(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), longConfig, nil)
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"worker_type":"banana"}`, 400, `worker_type "banana" is not a router_hint_worker_type: want aggregated, prefill or decode`},
		{`{"worker_type":"prefill","source_control_endpoints":{"x":"tcp://a:1"}}`, 400, `rank "x" must be a data-parallel rank`},
		{`{"worker_type":"prefill","source_control_endpoints":{"0":""}}`, 400, "rank 0 has an empty endpoint"},
		{`{"labels":{"bad key!":"x"}}`, 400, `label key "bad key!"`},
		{`{"worker_type":"aggregated"}`, 200, ""},
		{`{"worker_type":"decode"}`, 200, ""},
		{`{}`, 200, ""},
	} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/w0", strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(e.Error, tc.want) {
			t.Errorf("PUT %s: %d %q, want %d %q", tc.body, resp.StatusCode, e.Error, tc.status, tc.want)
		}
	}
	if n := gathered(t, s.Metrics, "kvhint_router_workers_refused_total", map[string]string{"source": "api"}); n != 4 {
		t.Errorf("refused API registrations = %v, want 4", n)
	}
	if _, err := workers.ParseWorkersFile([]byte("workers:\n- {id: w1, worker_type: banana}\n")); err == nil || !strings.Contains(err.Error(), `workers[0]: worker w1: worker_type "banana"`) {
		t.Errorf("workers file with banana: %v", err)
	}

	// A workers file with a banana is refused whole, logged and counted.
	path := filepath.Join(t.TempDir(), "workers.yaml")
	writeFile(t, path, "workers:\n- {id: w1, worker_type: banana}\n- {id: w2, worker_type: decode}\n")
	f := startSidecarWithConfig(t, testCatalog(t), longConfig, func(o *Options) { o.WorkersFile = path })
	testenv.Eventually(t, 5*time.Second, "the file's worker of no known type refused", func(context.Context) error {
		if n := gathered(t, f.Metrics, "kvhint_router_workers_refused_total", map[string]string{"source": "file"}); n != 1 {
			return fmt.Errorf("refused file registrations = %v, want 1", n)
		}
		return nil
	})
	if n, _ := f.Workers.Stats(); n != 0 {
		t.Errorf("%d workers registered from a file with an invalid worker", n)
	}
}

// TestPoolsStandalone: with pools set, a role's bookings reach only its
// pool's workers (labels given at registration); a role whose pool selects
// everything (no workerSelector) takes any worker, and a role the pools
// miss takes none: it fails closed.
func TestPoolsStandalone(t *testing.T) {
	const cfg = `
worker_selection:
  prefill: {type: kvcr, hints: [{type: kv-fetch}]}
  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}]}
  aggregated: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}]}
`
	s := startSidecarWithConfig(t, testCatalog(t), cfg, nil)
	p, d := startWorker(t, "p0"), startWorker(t, "d0")
	for _, reg := range []struct {
		srv  interface{ HintEndpoint() string }
		id   string
		body string
	}{
		{p, "p0", `{"capabilities":["router_hint"],"worker_type":"prefill","labels":{"component":"prefill"},"hint_endpoint":"%s"}`},
		{d, "d0", `{"capabilities":["router_hint"],"worker_type":"decode","labels":{"component":"decode"},"hint_endpoint":"%s"}`},
	} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/"+reg.id, strings.NewReader(fmt.Sprintf(reg.body, reg.srv.HintEndpoint())))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("PUT %s: %v %v", reg.id, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
	pools := map[string]labels.Selector{
		"prefill":    labels.SelectorFromSet(labels.Set{"component": "prefill"}),
		"decode":     labels.SelectorFromSet(labels.Set{"component": "decode"}),
		"aggregated": labels.Everything(),
	}
	s.applyPools(pools)
	final := `"session":{"id":"s","turn":1,"final":true},` + copyJSON("p1", "tcp://p1:1", []uint64{1, 2, 3})
	for _, tc := range []struct{ role, worker, outcome string }{
		{"prefill", "p0", "hinted"},
		{"prefill", "d0", "not_in_pool"},
		{"decode", "d0", "hinted"},
		{"decode", "p0", "not_in_pool"},
		{"aggregated", "p0", "hinted"},
		{"aggregated", "d0", "hinted"},
	} {
		resp := post(t, s, "/v1/bookings", bookingJSON("r", tc.role, tc.worker, final))
		if got := resp.header.Get(booking.HeaderOutcome); got != tc.outcome {
			t.Errorf("%s on %s: outcome %q (%d), want %q", tc.role, tc.worker, got, resp.status, tc.outcome)
		}
		if tc.outcome == "not_in_pool" && resp.status != http.StatusNoContent {
			t.Errorf("%s on %s: status %d, want 204", tc.role, tc.worker, resp.status)
		}
	}
	if n := counter(t, s.Metrics, "bookings", "prefill", "not_in_pool"); n != 1 {
		t.Errorf("prefill not_in_pool = %v, want 1", n)
	}
	// A role the pools miss admits no worker, not every worker.
	delete(pools, "aggregated")
	s.applyPools(pools)
	if got := post(t, s, "/v1/bookings", bookingJSON("r", "aggregated", "p0", final)).header.Get(booking.HeaderOutcome); got != "not_in_pool" {
		t.Errorf("aggregated, missing from the pools, on p0: outcome %q, want not_in_pool", got)
	}
	// No prefill hint (a kv.fetch) reached the decode worker.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := d.WaitForHints(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range got {
		if strings.Contains(string(h.Body), "kv.fetch") {
			t.Errorf("the decode worker got a prefill hint: %s", h.Body)
		}
	}
	// The workers API shows each worker's pools.
	wk, _ := s.Workers.Get("p0")
	if diff := cmp.Diff([]string{"prefill"}, wk.InPools); diff != "" {
		t.Errorf("p0 pools (-want +got):\n%s", diff)
	}
}

// TestPoolsFromMountedConfigMap: a mounted ConfigMap's roles.yaml
// workerSelectors make the pools, as the watched ConfigMap's do.
func TestPoolsFromMountedConfigMap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, wellknown.HintsConfigKey), `
worker_selection:
  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}]}
`)
	writeFile(t, filepath.Join(dir, wellknown.RolesKey), "decode:\n  routerMode: kv\n  workerSelector:\n    matchLabels: {component: decode}\n")
	s := startSidecar(t, testCatalog(t), "", func(o *Options) { o.ConfigFile, o.ConfigDir = "", dir })
	for _, w := range []struct{ id, component string }{{"d0", "decode"}, {"p0", "prefill"}} {
		if err := s.Workers.Set(workers.SourceAPI, workers.WorkerSpec{ID: w.id, Capabilities: []string{dispatch.CapabilityRouterHint}, Labels: map[string]string{"component": w.component}}); err != nil {
			t.Fatal(err)
		}
	}
	// The pools and the policy file load apart: both must be in force.
	testenv.Eventually(t, 5*time.Second, "d0 in pool decode and the config loaded", func(context.Context) error {
		if wk, _ := s.Workers.Get("d0"); !cmp.Equal(wk.InPools, []string{"decode"}) {
			return fmt.Errorf("d0 pools %v", wk.InPools)
		}
		if s.Dispatcher.ConfigHash() == "" {
			return fmt.Errorf("no hints config loaded yet")
		}
		return nil
	})
	final := `"session":{"id":"s","turn":1,"final":true}`
	if got := post(t, s, "/v1/bookings", bookingJSON("r1", "decode", "p0", final)).header.Get(booking.HeaderOutcome); got != "not_in_pool" {
		t.Errorf("decode on p0: %q, want not_in_pool", got)
	}
	if got := post(t, s, "/v1/bookings", bookingJSON("r2", "decode", "d0", final)).header.Get(booking.HeaderOutcome); got != "hinted" {
		t.Errorf("decode on d0: %q, want hinted", got)
	}
}
