package record

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// faultFS is the OS file system whose files fail or stall on demand.
type faultFS struct {
	// full makes every write write half its bytes and fail with ENOSPC,
	// as a full disk does.
	full atomic.Bool
	// stall, when not nil, holds every write until it is closed.
	stall chan struct{}
	// writing is closed by the first write that stalls.
	writing chan struct{}
	stalled atomic.Bool
}

func (fs *faultFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) Rename(from, to string) error { return os.Rename(from, to) }

type faultFile struct {
	*os.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.fs.stall != nil {
		if f.fs.stalled.CompareAndSwap(false, true) {
			close(f.fs.writing)
		}
		<-f.fs.stall
	}
	if f.fs.full.Load() {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(p)
}

// After a full disk the recorder cuts the file back to its last whole
// row, says it is failing, and writes again once the disk has room: the
// file then holds whole rows only, those before the fault and those
// after.
func TestWriteErrorCutsBackAndResumes(t *testing.T) {
	fs := &faultFS{}
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := New(Options{Path: path, SampleRate: 1, FlushInterval: 10 * time.Millisecond, fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	waitRows := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(string(b), "\n") == want && strings.HasSuffix(string(b), "\n") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the file is %q, want %d whole rows", b, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.Record(booking(1, "decode"), dispatch.Hint{})
	waitRows(1)
	fs.full.Store(true)
	r.Record(booking(2, "decode"), dispatch.Hint{})
	deadline := time.Now().Add(5 * time.Second)
	for !r.isFailing() {
		if time.Now().After(deadline) {
			t.Fatal("the recorder never said it is failing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitRows(1) // the half row is cut away
	fs.full.Store(false)
	r.Record(booking(3, "decode"), dispatch.Hint{})
	waitRows(2)
	if r.isFailing() {
		t.Error("still failing after a write succeeded")
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := lines(t, path)
	if len(got) != 2 || !strings.Contains(got[1], `"turn":4`) {
		t.Errorf("rows %q, want the first and the third booking's", got)
	}
}

// A file that stalls (a hung network disk) never holds shutdown past its
// deadline.
func TestCloseNeverWaitsPastTheDeadline(t *testing.T) {
	fs := &faultFS{stall: make(chan struct{}), writing: make(chan struct{})}
	defer close(fs.stall)
	path := filepath.Join(t.TempDir(), "t.jsonl")
	r, err := New(Options{Path: path, SampleRate: 1, FlushInterval: 10 * time.Millisecond, fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	r.Record(booking(1, "decode"), dispatch.Hint{})
	<-fs.writing
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = r.Close(ctx)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v with a deadline of 200ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close returned %v, want the deadline's error", err)
	}
}
