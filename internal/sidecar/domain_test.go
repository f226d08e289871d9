package sidecar

import (
	"net/http"
	"strings"
	"testing"
)

// TestTopologyDomains books over loopback HTTP for workers registered with
// their kv_transfer_domain: a worker that requires its domain gets no
// kv.fetch from a source in another domain, or from one the registry does
// not know, and the dropped copy is counted under outside_domain; a
// source in its domain, and any source for a worker that only prefers its
// domain, is fetched from.
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
	register("strict-a", `,"kv_transfer_domain":"rack-a","kv_transfer_enforcement":"required"`)
	register("loose-a", `,"kv_transfer_domain":"rack-a","kv_transfer_enforcement":"preferred"`)
	register("plain", ``)
	register("src-a", `,"kv_transfer_domain":"rack-a"`)
	register("src-b", `,"kv_transfer_domain":"rack-b"`)
	register("src-none", ``)

	// A registration that breaks the rules is refused with the reason.
	req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/bad", strings.NewReader(`{"kv_transfer_enforcement":"required"}`))
	if resp := roundTrip(t, http.DefaultClient, req); resp.status != http.StatusBadRequest || !strings.Contains(resp.body, "without a kv_transfer_domain") {
		t.Errorf("enforcement without a domain: %d %s", resp.status, resp.body)
	}

	tests := []struct {
		worker, source string
		fetch          bool
	}{
		{"strict-a", "src-a", true},
		{"strict-a", "src-b", false},
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
