package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestShutdownDrainsHintsFirst: ten clients stalled in the middle of a
// booking body must not hold shutdown, nor take the drain's budget. Queued
// hints to a slow worker are all sent, the stalled connections are closed
// after a short grace, and Shutdown returns once the hints are out, not at
// the end of its budget. Before the fix the servers' Shutdown waited the
// whole budget for the stalled clients, and the drain began only then,
// with no time left.
func TestShutdownDrainsHintsFirst(t *testing.T) {
	w := startWorker(t, "w")
	w.SetBehaviour(http.StatusNoContent, 50*time.Millisecond)
	o := Options{
		Catalog: testCatalog(t), Poll: 50 * time.Millisecond,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: testLogger(t),
		ShutdownWait: 3 * time.Second, ReadTimeout: 30 * time.Second, HintTTL: time.Minute,
		AllowLoopbackHintEndpoints: true,
	}
	o.ConfigFile = t.TempDir() + "/hints.yaml"
	writeFile(t, o.ConfigFile, dispatchConfig)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the sidecar ready", func(context.Context) error {
		if !s.Dispatcher.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	registerWorker(t, s, w)
	const hints = 10
	for i := range hints {
		if r := post(t, s, "/v1/bookings", bookingJSON(fmt.Sprint("sd-", i), "aggregated", "w", "")); r.status != http.StatusOK {
			t.Fatalf("booking: %d %s", r.status, r.body)
		}
	}
	stalled := stallBookings(t, s.BookingAddr(), 10, 100)
	// The stalled bookings are in their handlers before shutdown begins.
	testenv.Eventually(t, 5*time.Second, "the booking connections open", func(context.Context) error {
		if n := gathered(t, s.Metrics, dispatchmetrics.Namespace+"_open_connections", map[string]string{"listener": "booking"}); n < 10 {
			return fmt.Errorf("%v booking connections open", n)
		}
		return nil
	})

	start := time.Now()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	took := time.Since(start)
	t.Logf("shutdown with %d queued hints at 50 ms each and 10 stalled clients took %v", hints, took)
	if sent := gathered(t, s.Metrics, "kvhint_router_hints_sent_total", map[string]string{}); sent != hints {
		t.Errorf("%v hints sent, want %d; %v dropped at shutdown", sent, hints, gathered(t, s.Metrics, "kvhint_router_hints_dropped_total", map[string]string{"reason": "shutdown"}))
	}
	if took > 2*time.Second {
		t.Errorf("shutdown took %v of its 3s budget: the stalled clients held it", took)
	}
	for i, c := range stalled {
		if !closedWithin(c, time.Second) {
			t.Errorf("stalled connection %d still open after shutdown", i)
		}
	}
}
