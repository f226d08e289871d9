package record

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/preview"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// longCopy is a booking whose committed copy holds n block hashes and a
// hint message the size a kv.fetch of them takes in decimal JSON.
func longCopy(i, n int) (*dispatch.Booking, dispatch.Hint) {
	hs := make([]uint64, n)
	for j := range hs {
		hs[j] = uint64(i)<<32 | uint64(j)
	}
	b := &dispatch.Booking{RequestID: fmt.Sprintf("long-%d", i), Role: "decode", Worker: "w", PromptTokens: 16 * n, BlockSize: 16,
		KVCopy: &hints.CommittedCopy{SourceWorker: "p", BlockHashes: hs}}
	msg := []byte(`{"actions":[{"action_type":"kv.fetch","payload":{"block_hashes":[` + strings.Repeat("12345678901234567890,", n) + `0]}}]}`)
	return b, dispatch.Hint{Message: msg}
}

// A stalled disk fills the queue with long copies: the queue holds at
// most its byte bound, whatever the count, and the rest are dropped and
// counted.
func TestQueueBoundedInBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := newStopped(Options{Path: path, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n, hashes = 200, 40000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		b, h := longCopy(i, hashes)
		r.Record(b, h)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d bookings queued, %d dropped; heap %d MiB more than before", n-r.Dropped(), r.Dropped(), (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>20)
	perBooking := int64(8*hashes + 21*hashes)
	queued := (n - r.Dropped()) * perBooking
	if queued > DefaultMaxQueueBytes+perBooking {
		t.Errorf("the queue holds %d bookings of about %d bytes (%d MiB), over its bound of %d MiB",
			n-r.Dropped(), perBooking, queued>>20, DefaultMaxQueueBytes>>20)
	}
	if r.Dropped() == 0 {
		t.Error("no booking dropped")
	}
	go r.run()
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Sampling keeps sessions whole: every turn of a sampled session is
// recorded, and a session not sampled has none; requests outside a
// session are sampled by request ID.
func TestSampleBySession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := New(Options{Path: path, SampleRate: 0.3, Queue: 8192})
	if err != nil {
		t.Fatal(err)
	}
	const sessions, turns = 200, 6
	for s := range sessions {
		for turn := 1; turn <= turns; turn++ {
			b := &dispatch.Booking{RequestID: fmt.Sprintf("req-%d-%d", s, turn), Role: "decode", Worker: "w", PromptTokens: 100, BlockSize: 16,
				Session: hints.Session{ID: fmt.Sprintf("chat-%d", s), Turn: turn, Final: turn == turns}}
			r.Record(b, dispatch.Hint{})
		}
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	perSession := map[string]int{}
	for _, l := range lines(t, path) {
		i := strings.Index(l, `"session_id":"`)
		if i < 0 {
			t.Fatalf("row without a session: %s", l)
		}
		perSession[l[i+14:i+30]]++
	}
	for s, n := range perSession {
		if n != turns {
			t.Errorf("session %s has %d of its %d turns recorded", s, n, turns)
		}
	}
	if share := float64(len(perSession)) / sessions; share < 0.2 || share > 0.4 {
		t.Errorf("sampled %.3f of sessions at rate 0.3", share)
	}
}

// Rows reach the file within the flush interval, not only when 64 KiB
// have gathered or at Close: a SIGKILL loses at most an interval.
func TestTimedFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := New(Options{Path: path, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context())
	r.Record(booking(1, "decode"), dispatch.Hint{})
	deadline := time.Now().Add(3 * DefaultFlushInterval)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(b), "\n") == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the row is not in the file %v after it was recorded (flush interval %v)", 3*DefaultFlushInterval, DefaultFlushInterval)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A restart keeps the last run's recording: it is rotated aside, never
// truncated.
func TestRestartKeepsTheLastRecording(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	for run := range 2 {
		r, err := New(Options{Path: path, SampleRate: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			r.Record(booking(10*run+i, "decode"), dispatch.Hint{})
		}
		if err := r.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := lines(t, path); len(got) != 3 {
		t.Errorf("the new recording has %d rows, want 3", len(got))
	}
	b, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("the last run's recording is gone: %v", err)
	}
	if n := strings.Count(string(b), "\n"); n != 3 {
		t.Errorf("the last run's recording has %d rows, want 3", n)
	}
}

// A row is written only when preview reads a line that long.
func TestMaxRowBytesIsPreviewsLine(t *testing.T) {
	if MaxRowBytes != preview.MaxTraceLineBytes {
		t.Errorf("the recorder writes rows of up to %d bytes; preview reads lines of up to %d", MaxRowBytes, preview.MaxTraceLineBytes)
	}
}
