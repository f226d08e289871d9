package booking

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/sidecartest"
)

// TestBudget: small bodies are never charged; a long one is charged six
// bytes per declared byte (the booking limit when it declares none); one
// past the budget is refused and counted unless nothing else is charged;
// a release gives the room back.
func TestBudget(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBudget(15<<20, reg)
	const limit = 1 << 20
	if n, ok := b.reserve(smallBooking-1, limit); !ok || n != 0 {
		t.Fatalf("a small body: charged %d, %v", n, ok)
	}
	first, ok := b.reserve(1<<20, limit)
	if !ok || first != 6<<20 {
		t.Fatalf("a 1 MiB body: charged %d, %v; want 6 MiB", first, ok)
	}
	chunked, ok := b.reserve(-1, limit)
	if !ok || chunked != 6<<20 {
		t.Fatalf("a chunked body: charged %d, %v; want the limit's 6 MiB", chunked, ok)
	}
	if _, ok := b.reserve(1<<20, limit); ok {
		t.Fatal("a third 1 MiB body fit a 15 MiB budget")
	}
	if n, ok := b.reserve(100, limit); !ok || n != 0 {
		t.Fatal("a small body was refused with the budget full")
	}
	if got := sidecartest.Gathered(t, reg, "kvhint_router_bookings_refused_total", map[string]string{"reason": "memory_budget"}); got != 1 {
		t.Errorf("refusals counted %v, want 1", got)
	}
	b.release(first)
	b.release(chunked)
	if got := sidecartest.Gathered(t, reg, "kvhint_router_booking_memory_bytes", nil); got != 0 {
		t.Errorf("%v bytes charged after every release", got)
	}
	tiny := NewBudget(1<<20, nil)
	n, ok := tiny.reserve(1<<20, limit)
	if !ok {
		t.Fatal("a budget below one booking refused it with nothing else charged")
	}
	if _, ok := tiny.reserve(1<<20, limit); ok {
		t.Fatal("a second booking passed a budget below one")
	}
	tiny.release(n)
}
