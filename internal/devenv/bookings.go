package devenv

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/loadgen"
)

// BookingTotals counts what the booking stream did.
type BookingTotals struct {
	Bookings, Errors, Hints, Actions int
	LastError                        string
}

// Bookings drives a small, steady stream of bookings through the sidecars:
// llama's prefill (with committed KV copies half the time, as its kvcr
// selection would) and decode, and chat's decode in multi-turn sessions.
type Bookings struct {
	mu     sync.Mutex
	totals map[string]*BookingTotals
}

// Totals returns a copy of the counts per router.
func (b *Bookings) Totals() map[string]BookingTotals {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]BookingTotals{}
	for k, v := range b.totals {
		out[k] = *v
	}
	return out
}

// DriveBookings runs until ctx ends, at rate bookings per second per router.
func (e *Env) DriveBookings(ctx context.Context, rate float64) *Bookings {
	b := &Bookings{totals: map[string]*BookingTotals{}}
	streams := map[string][]loadgen.Role{
		"llama": {
			{Name: "prefill", Workers: []string{"llama-prefill-0", "llama-prefill-1"}, CopyRate: 0.5},
			{Name: "decode", Workers: []string{"llama-decode-0", "llama-decode-1"}},
		},
		"chat": {{Name: "decode", Workers: []string{"chat-0", "chat-1"}}},
	}
	for router, roles := range streams {
		s := e.Sidecar(router)
		if s == nil {
			continue
		}
		b.totals[router] = &BookingTotals{}
		go func() {
			for round := 1; ctx.Err() == nil; round++ {
				o := loadgen.Options{Target: s.BookingURL, Rate: rate, Duration: 2 * time.Second, Connections: 2,
					Roles: roles, MaxTurns: 4, BlockSize: 16, Seed: uint64(round),
					IDPrefix: router + "-" + strconv.Itoa(round) + "-"}
				res, err := loadgen.Run(ctx, o)
				if res != nil {
					b.mu.Lock()
					t := b.totals[router]
					t.Bookings += res.Completed
					t.Errors += res.Errors
					t.Hints += res.Hints
					t.Actions += res.Actions
					if res.FirstError != "" {
						t.LastError = res.FirstError
					}
					b.mu.Unlock()
				}
				if err != nil && ctx.Err() == nil {
					time.Sleep(time.Second)
				}
			}
		}()
	}
	return b
}
