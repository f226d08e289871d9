package workers

import (
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// fakeDelivery stands in for delivery: its queues take every hint.
type fakeDelivery struct{ noEndpoint int }

type fakeQueue struct {
	worker, endpoint string
	closed           bool
}

func (d *fakeDelivery) Queue(worker, endpoint string) Queue {
	return &fakeQueue{worker: worker, endpoint: endpoint}
}
func (d *fakeDelivery) NoEndpoint()                 { d.noEndpoint++ }
func (d *fakeDelivery) Forget(string)               {}
func (q *fakeQueue) Enqueue([]byte, time.Time) bool { return !q.closed }
func (q *fakeQueue) Close()                         { q.closed = true }

// eventually polls cond every 10 ms until it returns nil or the timeout
// passes, then fails with cond's last error.
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still false after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testLogger logs through t, so a failing test shows the logs.
func testLogger(t testing.TB) logr.Logger {
	if tt, ok := t.(*testing.T); ok {
		return testr.NewWithOptions(tt, testr.Options{Verbosity: 1})
	}
	return logr.Discard()
}

// writeFile writes data to path atomically (write and rename), so a
// watcher never reads half a file.
func writeFile(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
