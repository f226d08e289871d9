package booking

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
)

// readAll reads a body of n bytes through the budget.
func readAll(b *Budget, n, declared int) (*chargingReader, error) {
	cr := b.charged(bytes.NewReader(make([]byte, n)), declared)
	if cr == nil {
		return nil, nil
	}
	_, err := io.Copy(io.Discard, cr)
	return cr, err
}

// TestBudget: small bodies are never charged; a long one is charged as it
// arrives and six bytes per byte once it has; one past the budget is
// refused and counted unless nothing else is charged; a release gives
// the room back.
func TestBudget(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBudget(15<<20, reg)
	if cr := b.charged(bytes.NewReader(nil), smallBooking-1); cr != nil {
		t.Fatal("a small body is charged")
	}
	first, err := readAll(b, 1<<20, 1<<20)
	if err != nil || first.charge != 6<<20 {
		t.Fatalf("a 1 MiB body: charged %d, %v; want 6 MiB", first.charge, err)
	}
	chunked, err := readAll(b, 1<<20, -1)
	if err != nil || chunked.charge != 6<<20 {
		t.Fatalf("a chunked 1 MiB body: charged %d, %v; want 6 MiB", chunked.charge, err)
	}
	if cr, err := readAll(b, 1<<20, 1<<20); !errors.Is(err, errOverBudget) {
		t.Fatalf("a third 1 MiB body fit a 15 MiB budget: %v", err)
	} else if cr.release(); cr.charge != 0 {
		t.Fatal("a refused body keeps a charge")
	}
	if got := sidecartest.Gathered(t, reg, "kvhint_router_bookings_refused_total", map[string]string{"reason": "memory_budget"}); got != 1 {
		t.Errorf("refusals counted %v, want 1", got)
	}
	first.release()
	chunked.release()
	if got := sidecartest.Gathered(t, reg, "kvhint_router_booking_memory_bytes", nil); got != 0 {
		t.Errorf("%v bytes charged after every release", got)
	}
	tiny := NewBudget(1<<20, nil)
	alone, err := readAll(tiny, 1<<20, 1<<20)
	if err != nil {
		t.Fatal("a budget below one booking refused it with nothing else charged")
	}
	if _, err := readAll(tiny, 1<<20, 1<<20); !errors.Is(err, errOverBudget) {
		t.Fatal("a second booking passed a budget below one")
	}
	alone.release()
}

// stalled is a body that sends a few bytes and then nothing more.
type stalled struct{ sent bool }

func (s *stalled) Read(p []byte) (int, error) {
	if s.sent {
		return 0, errors.New("stalled (the read timeout would end it)")
	}
	s.sent = true
	return copy(p, make([]byte, 4<<10)), nil
}

// TestSlowSendersDoNotHoldTheBudget: six connections that declare 1 MiB
// bodies and send 4 KiB of them hold what they sent (64 KiB of buffer
// each, at the charge's granularity), not the 6 MiB each their declared
// length implies; a 47,000-hash booking (about 1 MiB) from another
// connection fits the default budget meanwhile. Charged by the declared
// length, as before, the six held 36 MiB of 32 and it was refused.
func TestSlowSendersDoNotHoldTheBudget(t *testing.T) {
	b := NewBudget(DefaultMaxBookingMemory, nil)
	var slow []*chargingReader
	for range 6 {
		cr := b.charged(&stalled{}, 1<<20)
		if _, err := cr.Read(make([]byte, 32<<10)); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, cr)
	}
	if held := b.used.Load(); held != 6*chargeStep*bookingBufferPerByte {
		t.Errorf("six slow senders hold %d bytes, want %d", held, 6*chargeStep*bookingBufferPerByte)
	}
	long := 47000 * 21 // a hash and its separator in the body
	cr, err := readAll(b, long, long)
	if err != nil {
		t.Fatalf("a 47,000-hash booking beside six slow senders: %v", err)
	}
	cr.release()
	for _, s := range slow {
		s.release()
	}
	if b.used.Load() != 0 {
		t.Errorf("%d bytes charged after every release", b.used.Load())
	}
}
