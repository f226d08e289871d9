package sidecar

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/test/receivers"
)

// TestReceiversTakeSidecarHints books over loopback HTTP and holds the
// hints the sidecar answers, and those its opt-in push delivers to a
// worker, to every receiver's rules (test/receivers): each takes them
// without refusal, warning or silence, and KVCR reads the committed copy.
func TestReceiversTakeSidecarHints(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)

	const copyOf = `"committed_kv_copy":{"source_worker":"worker-1","source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,22,11,18446744073709551615]}`
	bookings := []struct{ id, extra string }{
		{"middle-turn", `"session":{"id":"s1","turn":2,"final":false},` + copyOf},
		{"final-turn", `"session":{"id":"s1","turn":3,"final":true},` + copyOf},
		{"copy-only", copyOf},
	}
	for _, b := range bookings {
		resp := post(t, s, "/v1/bookings", bookingJSON(b.id, "decode", "worker-0", b.extra))
		if resp.status != 200 {
			t.Fatalf("%s: status %d: %s", b.id, resp.status, resp.body)
		}
		got, err := receivers.CheckAll([]byte(resp.body))
		if err != nil {
			t.Fatalf("%s: %v\n%s", b.id, err, resp.body)
		}
		want := &receivers.Fetch{Mode: "copy", SourceControlEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22, 1<<64 - 1}}
		if d := cmp.Diff(want, got["kvcr"].Fetch); d != "" {
			t.Errorf("%s: KVCR's fetch (-want +got):\n%s", b.id, d)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pushed, err := w.WaitForHints(ctx, len(bookings))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range pushed {
		if _, err := receivers.CheckAll(h.Body); err != nil {
			t.Errorf("pushed %s: %v", h.MessageID, err)
		}
	}
}
