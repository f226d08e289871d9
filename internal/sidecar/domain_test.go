package sidecar

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestTopologyDomains books over loopback HTTP for workers registered with
// their topology_domains and KV transfer policy, as Dynamo's workers
// publish them: a worker that requires its transfer domain (zone) gets no
// kv.fetch from a source with another zone, none, or one the registry
// does not know, even one that shares another domain (its rack) with it,
// and the dropped copy is counted under outside_domain; a source in its
// zone, and any source for a worker that only prefers its zone, is
// fetched from. The listing shows what each worker published.
func TestTopologyDomains(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	register := func(id, domain string) {
		t.Helper()
		body := `{"capabilities":["router_hint"],"worker_type":"decode"` + domain + `}`
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/"+id, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if resp := roundTrip(t, http.DefaultClient, req); resp.status != http.StatusOK {
			t.Fatalf("registering %s: %d %s", id, resp.status, resp.body)
		}
	}
	register("strict-a", `,"topology_domains":{"zone":"a","rack":"r1"},"kv_transfer_domain":"zone","kv_transfer_enforcement":"required"`)
	register("default-a", `,"topology_domains":{"zone":"a"},"kv_transfer_domain":"zone"`)
	register("loose-a", `,"topology_domains":{"zone":"a"},"kv_transfer_domain":"zone","kv_transfer_enforcement":"preferred","kv_transfer_preferred_weight":0.85`)
	register("plain", ``)
	register("src-a", `,"topology_domains":{"zone":"a","rack":"r2"}`)
	register("src-b", `,"topology_domains":{"zone":"b","rack":"r1"}`)
	register("src-none", ``)

	// A registration that breaks the rules is refused with the reason.
	for body, want := range map[string]string{
		`{"kv_transfer_enforcement":"required"}`:                                                              "without a kv_transfer_domain",
		`{"topology_domains":{"rack":"r1"},"kv_transfer_domain":"zone"}`:                                      "but topology_domains does not contain that domain (it has: rack)",
		`{"topology_domains":{"zone":"a"},"kv_transfer_domain":"zone","kv_transfer_enforcement":"preferred"}`: "kv_transfer_preferred_weight is missing",
	} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/bad", strings.NewReader(body))
		if resp := roundTrip(t, http.DefaultClient, req); resp.status != http.StatusBadRequest || !strings.Contains(resp.body, want) {
			t.Errorf("%s: %d %s; want 400 with %q", body, resp.status, resp.body, want)
		}
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+s.BookingAddr()+"/v1/workers/loose-a", nil)
	resp := roundTrip(t, http.DefaultClient, req)
	var listed struct {
		Domains map[string]string `json:"topology_domains"`
		Domain  string            `json:"kv_transfer_domain"`
		Weight  float64           `json:"kv_transfer_preferred_weight"`
	}
	if err := json.Unmarshal([]byte(resp.body), &listed); err != nil || resp.status != http.StatusOK ||
		listed.Domains["zone"] != "a" || listed.Domain != "zone" || listed.Weight != 0.85 {
		t.Errorf("GET loose-a: %d %s (%v)", resp.status, resp.body, err)
	}

	tests := []struct {
		worker, source string
		fetch          bool
	}{
		{"strict-a", "src-a", true},
		{"strict-a", "src-b", false}, // another zone, the same rack
		{"default-a", "src-a", true},
		{"default-a", "src-b", false},
		{"strict-a", "src-none", false},
		{"strict-a", "unregistered", false},
		{"loose-a", "src-b", true},
		{"plain", "src-b", true},
	}
	dropped := 0
	for _, tc := range tests {
		extra := `"session":{"id":"s1","turn":2,"final":false},"committed_kv_copy":{"source_worker":"` + tc.source + `","source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,22]}`
		resp := post(t, s, "/v1/bookings", bookingJSON(tc.worker+"-"+tc.source, "decode", tc.worker, extra))
		if resp.status != http.StatusOK {
			t.Fatalf("%s from %s: %d %s", tc.worker, tc.source, resp.status, resp.body)
		}
		if got := strings.Contains(resp.body, `"kv.fetch"`); got != tc.fetch {
			t.Errorf("%s from %s: kv.fetch sent %v, want %v: %s", tc.worker, tc.source, got, tc.fetch, resp.body)
		}
		// The other policies still run: the retain is there either way.
		if !strings.Contains(resp.body, `"kv.retain"`) {
			t.Errorf("%s from %s: no kv.retain: %s", tc.worker, tc.source, resp.body)
		}
		if !tc.fetch {
			dropped++
		}
	}
	if n := gathered(t, s.Metrics, "kvhint_router_kv_copies_dropped_total", map[string]string{"role": "decode", "reason": "outside_domain"}); n != float64(dropped) {
		t.Errorf("outside_domain drops %v, want %d", n, dropped)
	}
}
