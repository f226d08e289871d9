package workers

import (
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
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

// testLogger is sidecartest.Logger.
func testLogger(t testing.TB) logr.Logger { return sidecartest.Logger(t) }

// writeFile is sidecartest.WriteFile.
func writeFile(t testing.TB, path, data string) {
	t.Helper()
	sidecartest.WriteFile(t, path, data)
}

// parseSelector parses a label selector, failing the test on an error.
func parseSelector(t testing.TB, s string) labels.Selector {
	t.Helper()
	l, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
