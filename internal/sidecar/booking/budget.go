package booking

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
)

// DefaultMaxBookingMemory bounds the memory of the bookings in flight
// together: five bookings of a 1 MiB body (about 49,000 block hashes) at
// once, more than two cores work on. With the 64 MiB of queued hints, the
// recorder's 16 MiB queue when it records (--record-max-queued-bytes) and
// the sidecar's own 50 MiB it keeps the live heap near 165 MiB, under the
// Go memory limit config/router gives (0.7 of 256 MiB, 179 MiB).
const DefaultMaxBookingMemory = 32 << 20

// MaxBookingMemoryFlag is the flag that sets the budget, named in the 503.
const MaxBookingMemoryFlag = "--max-booking-memory"

// Memory a booking is charged with, per byte of its body: what it
// allocates, not only what it holds at once, since the collector frees
// the rest only later. The body buffer as it doubles to its length (about
// twice the body), the block hashes as their scratch list doubles and
// their copy (8 bytes for the 21 of each hash in the body: about 1.2
// times), and the kv-fetch arena and message (about the body's length
// each): 5.2, rounded up.
const bookingMemoryPerByte = 6

// smallBooking is the largest declared body that is not charged: bodies
// under it are read into pooled buffers and cost no more than the
// booking listener's connection cap allows, and a booking with no copy
// must never wait for one with a long one.
const smallBooking = 16 << 10

// Budget bounds the memory of the bookings in flight: a booking with a
// long committed copy is charged for what it holds as its body arrives,
// and for what it will hold before the body is decoded; one that does not
// fit is answered 503 with Retry-After at once, counted, rather than read
// into memory the container does not have. It is safe for concurrent use; nil is no budget.
type Budget struct {
	limit int64
	used  atomic.Int64
	// refused counts the bookings refused for the budget; nil counts
	// nothing.
	refused prometheus.Counter
}

// NewBudget returns a budget of limit bytes (0 means
// DefaultMaxBookingMemory) and registers its metrics in reg, if not nil.
func NewBudget(limit int64, reg prometheus.Registerer) *Budget {
	if limit <= 0 {
		limit = DefaultMaxBookingMemory
	}
	b := &Budget{limit: limit}
	if reg != nil {
		refused := prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: dispatchmetrics.Namespace, Name: "bookings_refused_total",
			Help: "Bookings answered 503 before their body was read, by reason (memory_budget: the bookings in flight held " + MaxBookingMemoryFlag + ").",
		}, []string{"reason"})
		b.refused = refused.WithLabelValues("memory_budget")
		reg.MustRegister(refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: dispatchmetrics.Namespace, Name: "booking_memory_bytes",
			Help: "Memory charged to the bookings in flight; bounded by " + MaxBookingMemoryFlag + ".",
		}, func() float64 { return float64(b.used.Load()) }))
	}
	return b
}

// Of bookingMemoryPerByte, what the body buffer holds while the body
// arrives (it doubles as it grows); the rest is charged once the body has
// arrived, before it is decoded.
const bookingBufferPerByte = 2

// chargeStep is the granularity of the charge while a body arrives.
const chargeStep = 64 << 10

// errOverBudget ends the read of a body the budget has no room for.
var errOverBudget = errors.New("the booking memory budget is full")

// charged returns the reader of a body that declares declared bytes
// (negative when chunked) which charges the budget as bytes arrive, not
// for what the body declares: a connection holds only what it has sent,
// so slow senders cannot hold the budget with bodies they have not sent.
// The buffer is charged as it fills, and the rest of the booking's
// memory once its end has arrived. A read the budget has no room for
// fails with errOverBudget. nil (no budget, or a small declared body,
// which is never charged) reads r as it is.
func (b *Budget) charged(r io.Reader, declared int) *chargingReader {
	if b == nil || (declared >= 0 && declared < smallBooking) {
		return nil
	}
	return &chargingReader{r: r, b: b}
}

// chargingReader is a body being read under the budget.
type chargingReader struct {
	r    io.Reader
	b    *Budget
	read int64
	// charge is what the body holds of the budget.
	charge int64
}

func (c *chargingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	want := (c.read + chargeStep - 1) / chargeStep * chargeStep * bookingBufferPerByte
	if err == io.EOF && c.read >= smallBooking {
		want = c.read * bookingMemoryPerByte
	}
	if want > c.charge && !c.add(want-c.charge) {
		return n, errOverBudget
	}
	return n, err
}

// add charges n more bytes, unless the budget then passes its limit while
// other bodies hold part of it: a body alone is always let in, so that a
// budget below one booking slows long bookings instead of refusing them.
func (c *chargingReader) add(n int64) bool {
	if used := c.b.used.Add(n); used > c.b.limit && used != c.charge+n {
		c.b.used.Add(-n)
		if c.b.refused != nil {
			c.b.refused.Inc()
		}
		return false
	}
	c.charge += n
	return true
}

// release gives back what the body held.
func (c *chargingReader) release() {
	if c != nil && c.charge > 0 {
		c.b.used.Add(-c.charge)
		c.charge = 0
	}
}

// refuseOverBudget answers a booking the budget had no room for: 503,
// Retry-After, and the connection closed, since the rest of its body is
// not read.
func (b *Budget) refuseOverBudget(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetCanonical(headerRetryAfter, valueOne)
	ctx.SetConnectionClose()
	listen.LingerOnClose(ctx.Conn())
	WriteError(ctx, fasthttp.StatusServiceUnavailable, fmt.Errorf(
		"the bookings in flight hold the sidecar's booking memory budget of %d bytes (%s); retry this one shortly", b.limit, MaxBookingMemoryFlag))
}
