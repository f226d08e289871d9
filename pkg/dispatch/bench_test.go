package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
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

// newBenchDispatcher wires a dispatcher to one hint-capable worker whose
// delivery is a buffered channel drained by a goroutine, as the sidecar's
// per-worker queue is: the measurement stops at the hand-off to delivery,
// where the booking path ends.
func newBenchDispatcher(b *testing.B) *Dispatcher { return newBenchDispatcherDeadline(b, 0) }

// newBenchDispatcherDeadline is newBenchDispatcher with a policy deadline:
// the long-copy benchmarks measure the work, and on a shared machine a
// preempted booking would otherwise lose its fetch and measure less.
func newBenchDispatcherDeadline(b *testing.B, deadline time.Duration) *Dispatcher {
	b.Helper()
	w := newChanWorker(1024)
	b.Cleanup(w.close)
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Workers: workerMap{"decode-worker-0": w}, PolicyDeadline: deadline, Log: logr.Discard()})
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
	p, _ := builtin.NewCatalog().Hint("kv-fetch")
	fetch, err := p.Parse(nil)
	if err != nil {
		b.Fatal(err)
	}
	bk := benchBooking(true)
	hc := hintstest.NewContext(hintstest.Booking{RequestID: bk.RequestID, Role: bk.Role, Worker: bk.Worker,
		PromptTokens: bk.PromptTokens, BlockSize: bk.BlockSize, Session: bk.Session, KVCopy: bk.KVCopy}, p.Commitments)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if acts, err := fetch.BuildHints(ctx, hc); err != nil || len(acts) != 1 {
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

// BenchmarkFormatHashes is strconv.AppendUint on the booking's 64 block
// hashes and nothing else: the least any encoder of a kv.fetch payload in
// decimal JSON (docs/design.md, 8a) pays on this machine.
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

// longSizes are the copies the long-prompt benchmarks book, in blocks: a
// copy of one block, where the dispatcher's own work is most of the cost;
// a 4k-token prompt at block size 64, then 16k, 128k (block size 16) and
// 1M tokens (block size 32).
var longSizes = []int{1, 64, 1024, 8192, 32768}

// longBooking is benchBooking with a copy of n random hashes.
func longBooking(n int) *Booking {
	bk := benchBooking(true)
	rng := rand.New(rand.NewPCG(uint64(n), 3))
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	bk.KVCopy.BlockHashes = hashes
	bk.PromptTokens = n * 16
	bk.BlockSize = 16
	return bk
}

// floorWriter writes the exact bytes of a booking's hint the cheapest way
// there is: the constant parts copied, the hashes appended with
// strconv.AppendUint, into a buffer allocated once. It is the irreducible
// work of any encoder of that message.
type floorWriter struct {
	prefix, suffix []byte
	hashes         []uint64
	buf            []byte
}

// newFloorWriter splits msg, the dispatcher's hint for bk, around the
// kv.fetch's hash list, and checks that the floor writes msg exactly.
func newFloorWriter(tb testing.TB, msg []byte, bk *Booking) *floorWriter {
	tb.Helper()
	key := []byte(`"block_hashes":[`)
	i := bytes.Index(msg, key)
	if i < 0 {
		tb.Fatalf("no block_hashes in %s", msg)
	}
	start := i + len(key)
	end := start + bytes.IndexByte(msg[start:], ']')
	f := &floorWriter{prefix: msg[:start], suffix: msg[end:], hashes: bk.KVCopy.BlockHashes, buf: make([]byte, 0, len(msg))}
	if got := f.write(); !bytes.Equal(got, msg) {
		tb.Fatalf("the floor writes other bytes than the dispatcher:\n%s\n%s", got, msg)
	}
	return f
}

func (f *floorWriter) write() []byte {
	buf := append(f.buf[:0], f.prefix...)
	for i, h := range f.hashes {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendUint(buf, h, 10)
	}
	return append(buf, f.suffix...)
}

// longBench sets up a long-copy benchmark: a dispatcher with a 1 s policy
// deadline, a booking with a copy of n blocks, the hint it yields, and
// the floor writer of the same bytes.
func longBench(b *testing.B, n int) (*Dispatcher, *Booking, Hint, *floorWriter) {
	b.Helper()
	bk := longBooking(n)
	d := newBenchDispatcherDeadline(b, time.Second)
	h, err := d.Book(context.Background(), bk)
	if err != nil || h.Actions != 2 {
		b.Fatalf("Book: %v, %d actions, want 2", err, h.Actions)
	}
	return d, bk, h, newFloorWriter(b, h.Message, bk)
}

// BenchmarkBookLong is BenchmarkBook (fetch+evict) on copies of 64 to
// 32,768 blocks, each next to BuildInto with reused memory (into) and its
// floor: the same message bytes written with strconv.AppendUint into a
// preallocated buffer. The goal is at most 1.25 times the floor, with at
// most 2 allocations, at every size.
func BenchmarkBookLong(b *testing.B) {
	for _, n := range longSizes {
		d, bk, h, f := longBench(b, n)
		ctx := context.Background()
		b.Run(fmt.Sprintf("blocks=%d/book", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(h.Message)))
			for b.Loop() {
				if h, err := d.Book(ctx, bk); err != nil || h.Actions != 2 {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("blocks=%d/into", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(h.Message)))
			mem := make([]byte, 0, len(h.Message))
			for b.Loop() {
				h, err := d.BuildInto(ctx, bk, mem)
				if err != nil || h.Actions != 2 {
					b.Fatal(err)
				}
				mem = h.Message[:0]
			}
		})
		b.Run(fmt.Sprintf("blocks=%d/floor", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(h.Message)))
			for b.Loop() {
				f.buf = f.write()
			}
		})
	}
}

// BenchmarkBookVsFloor books (Book, a new message each time), builds into
// reused memory (BuildInto, as an in-process router carrying hints in-band
// can) and writes the floor in turn, one after the other in every
// iteration, and reports each one's time and their ratios: on a shared
// machine, preemptions and other processes' cache traffic then fall on all
// alike, which separate benchmarks minutes apart do not guarantee. ns/op is
// the three together; book-ns/op, into-ns/op, floor-ns/op, book/floor and
// into/floor are the figures to read.
func BenchmarkBookVsFloor(b *testing.B) {
	for _, n := range longSizes {
		d, bk, h, f := longBench(b, n)
		ctx := context.Background()
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			var book, into, floor time.Duration
			mem := make([]byte, 0, len(h.Message))
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				if h, err := d.Book(ctx, bk); err != nil || h.Actions != 2 {
					b.Fatal(err)
				}
				t1 := time.Now()
				h, err := d.BuildInto(ctx, bk, mem)
				if err != nil || h.Actions != 2 {
					b.Fatal(err)
				}
				mem = h.Message[:0]
				t2 := time.Now()
				f.buf = f.write()
				floor += time.Since(t2)
				into += t2.Sub(t1)
				book += t1.Sub(t0)
			}
			b.ReportMetric(float64(book.Nanoseconds())/float64(b.N), "book-ns/op")
			b.ReportMetric(float64(into.Nanoseconds())/float64(b.N), "into-ns/op")
			b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "floor-ns/op")
			b.ReportMetric(float64(into)/float64(floor), "into/floor")
			b.ReportMetric(float64(book)/float64(floor), "book/floor")
		})
	}
}
