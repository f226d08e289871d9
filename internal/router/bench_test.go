package router

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/internal/hints"
	"github.com/kvrouter/kv-hint-operator/internal/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/internal/simworker"
)

// benchConfig is a decode role that runs the three built-ins: kvcr commits a
// KV copy (sent by kv-fetch), kv-retain keeps a session's blocks and kv-evict
// frees them at its end.
const benchConfig = `
router_mode: kv
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

// benchBooking is a realistic decode booking: a 4096-token prompt in blocks
// of 64, of which 64 blocks are committed to be pulled from a peer, on a
// session's last turn. Block hashes are random 64-bit values, as the
// router's hashes are, so most print as 19-20 digits.
func benchBooking(final bool) *Booking {
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	return &Booking{
		RequestID:    "req-7f3a9c2e-5b1d-4e8a-9c6f-0d2b3a4e5f60",
		Role:         "decode",
		Worker:       "decode-worker-0",
		PromptTokens: 4096,
		BlockSize:    64,
		Session:      hints.Session{ID: "sess-42", Turn: 3, Final: final},
		KVCopy: &hints.CommittedCopy{
			SourceWorker:   "decode-worker-1",
			SourceEndpoint: "tcp://10.0.0.7:23280",
			BlockHashes:    hashes,
		},
	}
}

// newBenchDispatcher wires a dispatcher to a registry whose one worker has a
// real queue and sender goroutine; the sender drops what it takes, so the
// measurement stops at the hand-off to delivery, where the booking path ends.
func newBenchDispatcher(b *testing.B) *Dispatcher {
	b.Helper()
	m := NewMetrics()
	del := NewDelivery(DeliveryOptions{Metrics: m, QueueSize: 1024})
	del.send = func(*queue, queued) {}
	b.Cleanup(func() { del.Close(context.Background()) })
	reg := NewRegistry(del)
	if err := reg.Set(SourceAPI, WorkerSpec{ID: "decode-worker-0", Capabilities: []string{CapabilityRouterHint}, HintEndpoint: "http://127.0.0.1:1/v1/hints"}); err != nil {
		b.Fatal(err)
	}
	d := NewDispatcher(DispatcherOptions{Catalog: builtin.NewCatalog(), Workers: reg, Metrics: m, Log: logr.Discard()})
	if err := d.Load([]byte(benchConfig), "bench"); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkBook measures one booking from the in-process API to the encoded
// hint handed to delivery: role lookup, worker lookup, three policies
// (kv-fetch with 64 block hashes, and kv-evict on a final turn or kv-retain
// on an earlier one), validation, numbering, envelope, metrics.
func BenchmarkBook(b *testing.B) {
	for _, tc := range []struct {
		name  string
		final bool
	}{{"fetch+evict", true}, {"fetch+retain", false}} {
		b.Run(tc.name, func(b *testing.B) {
			d := newBenchDispatcher(b)
			bk := benchBooking(tc.final)
			ctx := context.Background()
			if h, err := d.Book(ctx, bk); err != nil || h.Actions != 2 {
				b.Fatalf("Book: %v, %d actions, want 2", err, h.Actions)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Book(ctx, bk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuild is BenchmarkBook without the hand-off to delivery: the
// encoded hint alone, what Dispatcher.Build returns to a router that posts
// hints itself. The no-copy case books a session turn without a committed
// copy (kv-retain only), which isolates the dispatcher's own cost from the
// formatting of 64 block hashes.
func BenchmarkBuild(b *testing.B) {
	for _, tc := range []struct {
		name    string
		booking func() *Booking
		actions int
	}{
		{"fetch+evict", func() *Booking { return benchBooking(true) }, 2},
		{"no-copy", func() *Booking { bk := benchBooking(false); bk.KVCopy = nil; return bk }, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d := newBenchDispatcher(b)
			bk := tc.booking()
			ctx := context.Background()
			if h, err := d.Build(ctx, bk); err != nil || h.Actions != tc.actions {
				b.Fatalf("Build: %v, %d actions, want %d", err, h.Actions, tc.actions)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Build(ctx, bk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKVFetchPolicy is the built-in kv-fetch policy alone on 64 block
// hashes: the floor that the payload's decimal formatting sets for any
// booking that sends a copy.
func BenchmarkKVFetchPolicy(b *testing.B) {
	d := newBenchDispatcher(b)
	rr := d.snap.Load().roles["decode"]
	fetch := rr.hints[0].hint
	bk := benchBooking(true)
	hc := &hints.HintContext{RequestID: bk.RequestID, Role: bk.Role, Worker: bk.Worker, PromptTokens: bk.PromptTokens, BlockSize: bk.BlockSize, Session: bk.Session}
	hc.SetCommittedKVCopy(bk.KVCopy)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if acts, err := fetch.Build(ctx, hc); err != nil || len(acts) != 1 {
			b.Fatal(err)
		}
	}
}

// BenchmarkBookParallel is BenchmarkBook from every core at once: the
// snapshot, registry and pooled scratch must not serialise bookings.
func BenchmarkBookParallel(b *testing.B) {
	d := newBenchDispatcher(b)
	bk := benchBooking(true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := d.Book(ctx, bk); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

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
	s, err := New(Options{Catalog: builtin.NewCatalog(), ConfigFile: path, Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: logr.Discard()})
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
	if err := s.Workers.Set(SourceAPI, WorkerSpec{ID: "decode-worker-0", Capabilities: []string{CapabilityRouterHint}, HintEndpoint: w.HintEndpoint()}); err != nil {
		b.Fatal(err)
	}
	eventually(b, 5*time.Second, func() error {
		if !s.Dispatcher.Ready() {
			return ErrNotReady
		}
		return nil
	})
	bk := benchBooking(true)
	body, err := json.Marshal(map[string]any{
		"request_id": bk.RequestID, "role": bk.Role, "worker": bk.Worker,
		"prompt_tokens": bk.PromptTokens, "block_size": bk.BlockSize,
		"session":           map[string]any{"id": bk.Session.ID, "turn": bk.Session.Turn, "final": bk.Session.Final},
		"committed_kv_copy": map[string]any{"source_worker": bk.KVCopy.SourceWorker, "source_endpoint": bk.KVCopy.SourceEndpoint, "block_hashes": bk.KVCopy.BlockHashes},
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

// BenchmarkFormatHashes is strconv.AppendUint on the booking's 64 block
// hashes and nothing else: the least any encoder of a kv.fetch payload in
// decimal JSON (DESIGN 8a) pays on this machine.
func BenchmarkFormatHashes(b *testing.B) {
	hashes := benchBooking(true).KVCopy.BlockHashes
	buf := make([]byte, 0, 21*len(hashes))
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, h := range hashes {
			buf = strconv.AppendUint(buf, h, 10)
			buf = append(buf, ',')
		}
	}
}
