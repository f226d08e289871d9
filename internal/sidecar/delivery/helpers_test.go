package delivery

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
)

// registryDelivery is a Delivery as the registry takes it, as the sidecar
// assembles them.
type registryDelivery struct{ *Delivery }

func (d registryDelivery) Queue(worker, endpoint string) workers.Queue {
	return d.NewQueue(worker, endpoint)
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// startWorker runs a simulated worker on loopback until the test ends.
func startWorker(t *testing.T, id string) *simworker.Server {
	t.Helper()
	srv, err := simworker.Start(simworker.New(simworker.Options{ID: id, WorkerType: "decode"}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func staticJSON(n int, tag string) string {
	return fmt.Sprintf(`{"action_id":"a%d","action_type":"test.static","action_version":"1.0","payload":{"tag":%q}}`, n, tag)
}

func message(id string, actions ...string) string {
	return `{"protocol_version":"0.1","message_id":"` + id + `","actions":[` + strings.Join(actions, ",") + `]}`
}

// testLogger is sidecartest.Logger.
func testLogger(t testing.TB) logr.Logger { return sidecartest.Logger(t) }

// gathered is sidecartest.Gathered.
func gathered(t testing.TB, g prometheus.Gatherer, metric string, want map[string]string) float64 {
	t.Helper()
	return sidecartest.Gathered(t, g, metric, want)
}

// deliveryCounters are delivery's counter vectors, for counter.
var deliveryCounters = map[string]sidecartest.Series{
	"hints_dropped":   {Metric: dispatchmetrics.Namespace + "_hints_dropped_total", Labels: []string{"reason"}},
	"delivery_errors": {Metric: dispatchmetrics.Namespace + "_delivery_errors_total", Labels: []string{"reason"}},
}

// counter reads one series of delivery's counter vectors, as a scrape
// would: labels are given in the order the metric declares them.
func counter(t testing.TB, m *Metrics, name string, labels ...string) float64 {
	t.Helper()
	return sidecartest.Counter(t, m.reg, deliveryCounters, name, labels...)
}
