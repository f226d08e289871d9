// Package sidecartest holds the test helpers the sidecar's rooms share:
// polling for a condition, a logger that writes through the test, atomic
// file writes for the watchers, and reading one metric series. Only tests
// import it; it imports nothing of the product.
package sidecartest

import (
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
)

// Eventually polls cond every 10 ms until it returns nil or the timeout
// passes, then fails with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
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

// Logger logs through t, so a failing test shows the logs; a benchmark's
// are discarded.
func Logger(t testing.TB) logr.Logger {
	if tt, ok := t.(*testing.T); ok {
		return testr.NewWithOptions(tt, testr.Options{Verbosity: 1})
	}
	return logr.Discard()
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
