package filewatch_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/filewatch"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// noPoll is a poll interval no test lasts: what these tests see comes from
// file-system events alone.
const noPoll = time.Hour

const wait = 5 * time.Second

// loads records what each call of Watch's load read from the file.
type loads struct {
	path string
	mu   sync.Mutex
	seen []string // the file's content, or "error: ..." when it could not be read
}

func (l *loads) load() {
	data, err := filewatch.ReadLimited(l.path, 1<<10)
	v := string(data)
	if err != nil {
		v = "error: " + err.Error()
	}
	l.mu.Lock()
	l.seen = append(l.seen, v)
	l.mu.Unlock()
}

func (l *loads) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// waitFor waits until a load after the first `after` has read what match
// accepts.
func (l *loads) waitFor(t *testing.T, what string, after int, match func(string) bool) {
	t.Helper()
	testenv.Eventually(t, wait, what, func(context.Context) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, v := range l.seen[min(after, len(l.seen)):] {
			if match(v) {
				return nil
			}
		}
		return fmt.Errorf("loads after the first %d read %q", after, l.seen[min(after, len(l.seen)):])
	})
}

func is(want string) func(string) bool { return func(v string) bool { return v == want } }

// missing matches a load that found no file.
func missing(v string) bool {
	return strings.HasPrefix(v, "error: ") && strings.Contains(v, "no such file or directory")
}

// watch runs Watch on path until the test ends, and waits for it to
// return then.
func watch(t *testing.T, path string, poll time.Duration) *loads {
	t.Helper()
	l := &loads{path: path}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		filewatch.Watch(ctx, path, poll, testr.New(t), l.load)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("Watch did not return within %s of its context's end", wait)
		}
	})
	return l
}

// watchNew writes a new file, watches it from events alone and waits for
// the load at start.
func watchNew(t *testing.T, name, content string) *loads {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	write(t, path, content)
	l := watch(t, path, noPoll)
	l.waitFor(t, "the load at start", 0, is(content))
	return l
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWriteDeleteRecreate pins that Watch loads once at start and again
// after each change to the file, from events alone: an in-place write, a
// deletion (the load sees the file gone) and a re-creation.
func TestWriteDeleteRecreate(t *testing.T) {
	l := watchNew(t, "workers.yaml", "v1")
	path := l.path

	n := l.count()
	write(t, path, "v2")
	l.waitFor(t, "a load after a write", n, is("v2"))

	n = l.count()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "a load after the file was deleted", n, missing)

	n = l.count()
	write(t, path, "v3")
	l.waitFor(t, "a load after the file was created again", n, is("v3"))
}

// TestKubeletSwap pins the reason Watch watches the directory: kubelet
// updates a mounted ConfigMap by writing a new timestamped directory and
// renaming a ..data symlink over the old one, so the file the sidecar
// opens (config.yaml -> ..data/config.yaml) is never written itself.
func TestKubeletSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "config.yaml"), content)
	}
	swap := func(name string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_12_06_10_00_00.1", "config 1")
	if err := os.Symlink("..2026_12_06_10_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), path); err != nil {
		t.Fatal(err)
	}

	l := watch(t, path, noPoll)
	l.waitFor(t, "the load at start", 0, is("config 1"))

	for i, content := range []string{"config 2", "config 3"} {
		n := l.count()
		name := fmt.Sprintf("..2026_12_06_10_0%d_00.1", i+1)
		version(name, content)
		swap(name)
		l.waitFor(t, "a load after kubelet's swap to "+content, n, is(content))
	}
}

// TestBurstCoalesced pins the settle delay: a burst of writes microseconds
// apart costs a few loads, not one per event, and the last load reads the
// last write.
func TestBurstCoalesced(t *testing.T) {
	l := watchNew(t, "config.yaml", "start")
	path := l.path

	n := l.count()
	const writes = 50
	for i := range writes {
		write(t, path, fmt.Sprintf("write %d", i))
	}
	last := fmt.Sprintf("write %d", writes-1)
	l.waitFor(t, "a load of the last write", n, is(last))
	// Each write is at least one event; one load per event would be 50.
	got := l.count() - n
	t.Logf("%d writes in a burst caused %d loads", writes, got)
	if got > writes/5 {
		t.Errorf("%d writes in a burst caused %d loads, want them coalesced (at most %d)", writes, got, writes/5)
	}
}

// TestPollFindsLateDirectory pins the poll fallback: a directory that does
// not exist at start cannot be watched, and the poll still loads the file
// once it appears.
func TestPollFindsLateDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	path := filepath.Join(dir, "config.yaml")
	l := watch(t, path, 50*time.Millisecond)
	l.waitFor(t, "the load at start, of a missing file", 0, missing)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, path, "late")
	l.waitFor(t, "a load once the directory appeared", 0, is("late"))
}

// TestReadLimited pins the size cap Watch's callers read with: a file of
// exactly limit bytes is read, one byte more is refused naming the file
// and the limit, and a missing file is fs.ErrNotExist.
func TestReadLimited(t *testing.T) {
	dir := t.TempDir()
	at, over := filepath.Join(dir, "at"), filepath.Join(dir, "over")
	write(t, at, strings.Repeat("x", 16))
	write(t, over, strings.Repeat("x", 17))

	if data, err := filewatch.ReadLimited(at, 16); err != nil || len(data) != 16 {
		t.Errorf("ReadLimited of 16 bytes, limit 16: %d bytes, %v", len(data), err)
	}
	_, err := filewatch.ReadLimited(over, 16)
	if want := over + " is over the 16-byte limit"; err == nil || err.Error() != want {
		t.Errorf("ReadLimited of 17 bytes, limit 16: %v, want %q", err, want)
	}
	if _, err := filewatch.ReadLimited(filepath.Join(dir, "missing"), 16); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadLimited of a missing file: %v, want fs.ErrNotExist", err)
	}
}
