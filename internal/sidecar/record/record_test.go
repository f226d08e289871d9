package record

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func booking(i int, role string) *dispatch.Booking {
	return &dispatch.Booking{RequestID: fmt.Sprintf("req-%d", i), Role: role, Worker: "w", PromptTokens: 100, BlockSize: 16,
		Session: hints.Session{ID: "s", Turn: i + 1}, KVCopy: &hints.CommittedCopy{SourceWorker: "p", BlockHashes: []uint64{7, 8}}}
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// A full queue drops the booking and counts it; Record never waits.
func TestFullQueueDropsAndCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := newStopped(Options{Path: path, SampleRate: 1, Queue: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r.Record(booking(i, "decode"), dispatch.Hint{})
	}
	if r.Dropped() != 6 {
		t.Errorf("dropped %d, want 6", r.Dropped())
	}
	go r.run()
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := lines(t, path); len(got) != 4 {
		t.Errorf("%d rows written, want the 4 queued", len(got))
	}
	r.Record(booking(99, "decode"), dispatch.Hint{}) // after Close: ignored, no panic
}

// The file rotates at MaxBytes and keeps MaxFiles rotated files.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := New(Options{Path: path, SampleRate: 1, MaxBytes: 600, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		r.Record(booking(i, "decode"), dispatch.Hint{})
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + ".1", path + ".2"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Size() > 600 {
			t.Errorf("%s is %d bytes, over 600", p, st.Size())
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 exists: more rotated files kept than MaxFiles", path)
	}
}

// Outside a session sampling is by request: both roles of a request are
// recorded or neither, and the share is near the rate.
func TestSampleByRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := New(Options{Path: path, SampleRate: 0.3, Queue: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		for _, role := range []string{"prefill", "decode"} {
			b := booking(i, role)
			b.Session = hints.Session{}
			r.Record(b, dispatch.Hint{})
		}
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := lines(t, path)
	if len(got)%2 != 0 {
		t.Fatalf("%d rows: a request's roles were sampled apart", len(got))
	}
	for i := 0; i < len(got); i += 2 {
		a, b := got[i][strings.Index(got[i], `"request_id"`):], got[i+1][strings.Index(got[i+1], `"request_id"`):]
		if a[:40] != b[:40] || !strings.Contains(got[i], `"prefill"`) || !strings.Contains(got[i+1], `"decode"`) {
			t.Fatalf("rows %d and %d are not one request's two roles:\n%s\n%s", i, i+1, got[i], got[i+1])
		}
	}
	if share := float64(len(got)/2) / n; share < 0.25 || share > 0.35 {
		t.Errorf("sampled %.3f of requests at rate 0.3", share)
	}
}
