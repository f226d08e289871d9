// Package ratelog is the sidecar's one rate-limited logger: an error that
// can repeat at the rate of bookings (a worker that refuses every hint) is
// logged at most once per interval per source, and counted by the caller's
// metrics every time.
//
// It imports only the standard library and logr.
package ratelog

import (
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Limiter lets one log through per Interval. The zero value with an
// Interval set is ready; it is safe for concurrent use.
type Limiter struct {
	Interval time.Duration
	last     atomic.Int64
}

// Allow reports whether a log may go out now, and if so records it.
func (l *Limiter) Allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(l.Interval) && l.last.CompareAndSwap(last, now)
}

// Error logs err through log when Allow lets it.
func (l *Limiter) Error(log logr.Logger, err error, msg string, kv ...any) {
	if l.Allow() {
		log.Error(err, msg, kv...)
	}
}
