package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// benchConfig is a decode role that runs the three built-ins: kvcr commits a
// KV copy (sent by kv-fetch), kv-retain keeps a session's blocks and kv-evict
// frees them at its end.
const benchConfig = `
worker_selection:
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv-fetch
      - type: kv-retain
        parameters: {ttl_seconds: 600}
      - type: kv-evict
`

// BenchmarkBookHTTP is a booking as an out-of-process router makes it: POST
// /v1/bookings over a keep-alive loopback connection, JSON decoding of the
// 64 block hashes included, to the answer with the hint. Delivery goes to
// a simulated worker on loopback, as in production, so the worker's and
// the sender's work share the two cores with the measured path.
func BenchmarkBookHTTP(b *testing.B) {
	path := filepath.Join(b.TempDir(), "hints.yaml")
	if err := os.WriteFile(path, []byte(benchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Catalog: builtin.NewCatalog(), ConfigFile: path, Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", AllowLoopbackHintEndpoints: true, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	w, err := simworker.Start(simworker.New(simworker.Options{ID: "decode-worker-0", MaxRecorded: 1}), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	if err := s.Workers.Set(workers.SourceAPI, workers.WorkerSpec{ID: "decode-worker-0", Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: w.HintEndpoint()}); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, 5*time.Second, "the sidecar ready", func(context.Context) error {
		if !s.Dispatcher.Ready() {
			return dispatch.ErrNotReady
		}
		return nil
	})
	// The booking of pkg/dispatch's BenchmarkBook: a session's last turn with
	// 64 random block hashes committed.
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	body, err := json.Marshal(map[string]any{
		"request_id": "req-7f3a9c2e-5b1d-4e8a-9c6f-0d2b3a4e5f60", "role": "decode", "worker": "decode-worker-0",
		"prompt_tokens": 4096, "block_size": 64,
		"session":           map[string]any{"id": "sess-42", "turn": 3, "final": true},
		"committed_kv_copy": map[string]any{"source_worker": "decode-worker-1", "source_endpoint": "tcp://10.0.0.7:23280", "block_hashes": hashes},
	})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	url := "http://" + s.BookingAddr() + "/v1/bookings"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
