// Package sidecartest holds the test helpers the sidecar's rooms share
// (testenv.Eventually polls): a logger that writes through the test, atomic
// file writes for the watchers, and reading one metric series. Only tests
// import it; it imports nothing of the product.
package sidecartest

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
)

// Logger logs through t, so a failing test shows the logs; a benchmark's
// are discarded. Once the test's cleanups run it discards too: a
// dispatcher's timers (a policy re-admitted after its ejection) may log
// after the test that started them has ended, which t.Log refuses with a
// panic.
func Logger(t testing.TB) logr.Logger {
	tt, ok := t.(*testing.T)
	if !ok {
		return logr.Discard()
	}
	done := new(atomic.Bool)
	t.Cleanup(func() { done.Store(true) })
	return logr.New(untilDone{LogSink: testr.NewWithOptions(tt, testr.Options{Verbosity: 1}).GetSink(), done: done})
}

// untilDone passes logs to its sink until done is set.
type untilDone struct {
	logr.LogSink
	done *atomic.Bool
}

func (u untilDone) Enabled(level int) bool { return !u.done.Load() && u.LogSink.Enabled(level) }

func (u untilDone) Info(level int, msg string, kv ...any) {
	if !u.done.Load() {
		u.LogSink.Info(level, msg, kv...)
	}
}

func (u untilDone) Error(err error, msg string, kv ...any) {
	if !u.done.Load() {
		u.LogSink.Error(err, msg, kv...)
	}
}

func (u untilDone) WithValues(kv ...any) logr.LogSink {
	return untilDone{LogSink: u.LogSink.WithValues(kv...), done: u.done}
}

func (u untilDone) WithName(name string) logr.LogSink {
	return untilDone{LogSink: u.LogSink.WithName(name), done: u.done}
}

// WriteFile writes data to path atomically (write and rename), so a
// watcher never reads half a file.
func WriteFile(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Gathered returns the value of the one series of a metric whose labels
// are exactly want, or 0 when it has not been created.
func Gathered(t testing.TB, g prometheus.Gatherer, metric string, want map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) != len(want) {
				continue
			}
			for _, l := range s.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			switch {
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue()
			}
			t.Fatalf("%s is neither a counter nor a gauge", metric)
		}
	}
	return 0
}

// Series names a counter vector for Counter: its metric name and its
// label names, in the order the metric declares them.
type Series struct {
	Metric string
	Labels []string
}

// Counter reads one series of a counter vector, as a scrape would: name
// is a key of table, and values are the series' label values in the
// order Series.Labels gives them.
func Counter(t testing.TB, g prometheus.Gatherer, table map[string]Series, name string, values ...string) float64 {
	t.Helper()
	sr, ok := table[name]
	if !ok || len(sr.Labels) != len(values) {
		t.Fatalf("no counter %s with %d labels", name, len(values))
	}
	want := make(map[string]string, len(values))
	for i, l := range sr.Labels {
		want[l] = values[i]
	}
	return Gathered(t, g, sr.Metric, want)
}

// SocketDir is a short directory for Unix sockets, removed when the test
// ends: t.TempDir's paths can pass the 107 bytes a socket address holds.
func SocketDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kvs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
