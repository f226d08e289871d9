package booking

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/pkg/router"
)

// DefaultMaxBookingMemory bounds the memory of the bookings in flight
// together: five bookings of a 1 MiB body (about 49,000 block hashes) at
// once, more than two cores work on. With the 64 MiB of queued hints and
// the sidecar's own 50 MiB it keeps the live heap near 150 MiB, under the
// Go memory limit config/router gives (0.7 of 256 MiB).
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
// long committed copy is charged for what it will hold before its body is
// read, and one that does not fit is answered 503 with Retry-After at
// once, counted, rather than read into memory the container does not
// have. It is safe for concurrent use; nil is no budget.
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
			Namespace: router.MetricsNamespace, Name: "bookings_refused_total",
			Help: "Bookings answered 503 before their body was read, by reason (memory_budget: the bookings in flight held " + MaxBookingMemoryFlag + ").",
		}, []string{"reason"})
		b.refused = refused.WithLabelValues("memory_budget")
		reg.MustRegister(refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: router.MetricsNamespace, Name: "booking_memory_bytes",
			Help: "Memory charged to the bookings in flight; bounded by " + MaxBookingMemoryFlag + ".",
		}, func() float64 { return float64(b.used.Load()) }))
	}
	return b
}

// reserve charges a booking whose body declares declared bytes (negative
// when it declares none: chunked, charged as the whole booking limit). It
// returns the charge to release, and false when the budget has no room.
// A booking is always let in when nothing else is charged, so that a
// budget below one booking slows long bookings instead of refusing them
// all.
func (b *Budget) reserve(declared, limit int) (int64, bool) {
	if b == nil || (declared >= 0 && declared < smallBooking) {
		return 0, true
	}
	if declared < 0 || declared > limit {
		declared = limit
	}
	n := int64(declared) * bookingMemoryPerByte
	if used := b.used.Add(n); used > b.limit && used != n {
		b.used.Add(-n)
		if b.refused != nil {
			b.refused.Inc()
		}
		return 0, false
	}
	return n, true
}

func (b *Budget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// refuseOverBudget answers a booking the budget had no room for: 503,
// Retry-After, and the connection closed, since its body is not read.
func (b *Budget) refuseOverBudget(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetCanonical(headerRetryAfter, valueOne)
	ctx.SetConnectionClose()
	listen.LingerOnClose(ctx.Conn())
	WriteError(ctx, fasthttp.StatusServiceUnavailable, fmt.Errorf(
		"the bookings in flight hold the sidecar's booking memory budget of %d bytes (%s); retry this one shortly", b.limit, MaxBookingMemoryFlag))
}
