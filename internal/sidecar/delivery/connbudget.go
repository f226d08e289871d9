package delivery

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/internal/ratelog"
)

// DefaultMaxWorkerConns caps the connections open to all workers together:
// two for each of workers.DefaultMaxWorkersPerSource workers. The
// descriptor limit lowers it (ConnLimit): connections to workers must never
// take the descriptors the listeners need to accept bookings.
const DefaultMaxWorkerConns = 4096

// Descriptors the sidecar keeps for itself besides its listeners' caps:
// the listeners, the log, the API server's connections, file watches,
// the poller, standard streams.
const fdReserve = 64

// minWorkerConns is the least connection budget, whatever the descriptor
// limit: a few workers are served one connection after another.
const minWorkerConns = 16

// ConnLimit is the connection budget for workers under the process's
// descriptor limit: at most limit (0 means DefaultMaxWorkerConns), and never
// more than the limit leaves after listenerConns (the caps of the
// listeners, whose connections are one descriptor each) and fdReserve.
func ConnLimit(limit, listenerConns int) int {
	if limit <= 0 {
		limit = DefaultMaxWorkerConns
	}
	if nofile, ok := openFileLimit(); ok {
		limit = min(limit, nofile-listenerConns-fdReserve)
	}
	return max(limit, minWorkerConns)
}

// errConnLimit fails a dial when every connection the budget allows is
// open: the hint is counted as a delivery error (connection_limit), not
// queued for a descriptor that may never come.
var errConnLimit = errors.New("every connection the worker connection budget allows is open (--max-worker-connections, lowered by the descriptor limit)")

// connBudget bounds the connections open to workers, dials included,
// across every poster. Under pressure (three quarters of it open) a
// poster closes its connection after each post instead of keeping it idle
// for its next hint; when it is spent, a dial first closes the idle
// connections of every worker (at most every sweepInterval) and tries
// once more, so idle connections never starve a worker that has a hint.
type connBudget struct {
	limit int64
	open  atomic.Int64
	// sweep closes the idle connections of every live worker.
	sweep     func()
	lastSweep atomic.Int64
	log       logr.Logger
	logLimit  ratelog.Limiter
}

// sweepInterval is the least time between two sweeps of idle connections.
const sweepInterval = 50 * time.Millisecond

// acquire takes a connection from the budget, or reports that none is left.
func (b *connBudget) acquire() bool {
	if b.take() {
		return true
	}
	now := time.Now().UnixNano()
	if last := b.lastSweep.Load(); now-last >= int64(sweepInterval) && b.lastSweep.CompareAndSwap(last, now) && b.sweep != nil {
		b.sweep()
		if b.take() {
			return true
		}
	}
	b.logLimit.Error(b.log, errConnLimit, "A hint post found no connection left in the budget; not retried",
		"limit", b.limit, "note", "logged at most every "+failureLogInterval.String()+"; see kvhint_router_delivery_errors_total{reason=\"connection_limit\"}")
	return false
}

func (b *connBudget) take() bool {
	if b.open.Add(1) <= b.limit {
		return true
	}
	b.open.Add(-1)
	return false
}

func (b *connBudget) release() { b.open.Add(-1) }

// pressed reports whether three quarters of the budget are open.
func (b *connBudget) pressed() bool { return b.open.Load()*4 > b.limit*3 }

// sweepIdle closes the idle connections of every live worker.
func (d *Delivery) sweepIdle() {
	d.mu.Lock()
	ps := make([]*poster, 0, len(d.live))
	for q := range d.live {
		ps = append(ps, q.p)
	}
	d.mu.Unlock()
	for _, p := range ps {
		if p != nil {
			p.close()
		}
	}
}
