package workers

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
)

// DefaultMaxWorkersPerSource caps the workers one source (the API, the
// workers file, the worker pods) may register. A hinted worker costs a
// sender, a client and up to MaxConnsPerWorker connections, so a peer that
// registers without end must not grow the sidecar without end; a router
// pod fronts hundreds of workers, not thousands.
const DefaultMaxWorkersPerSource = 2048

// MaxWorkersPerSourceFlag is the flag that sets the cap, named in refusals.
const MaxWorkersPerSourceFlag = "--max-workers-per-source"

// ErrSourceFull is the refusal of a worker past its source's cap.
var ErrSourceFull = errors.New("the worker source is at its cap")

// sourceCap is the registry's cap on the workers of each source. Guarded
// by Registry.mu, but for the counter.
type sourceCap struct {
	max int
	log logr.Logger
	// refused are the IDs each source's last Replace left out, so that a
	// source that lists the same surplus again (pods resync on every pod
	// event) counts each worker once, and the log says only a change.
	refused map[string]map[string]bool
	// overLimit counts refused workers by source; nil counts nothing.
	overLimit *prometheus.CounterVec
}

// SetMaxPerSource sets the cap on each source's workers (0 means
// DefaultMaxWorkersPerSource) and the logger of the refusals. Call it
// before the sources start.
func (r *Registry) SetMaxPerSource(n int, log logr.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 {
		n = DefaultMaxWorkersPerSource
	}
	r.limit.max, r.limit.log = n, log
}

func (c *sourceCap) cap() int {
	if c.max <= 0 {
		return DefaultMaxWorkersPerSource
	}
	return c.max
}

// countOverLimit counts n workers of source refused for the cap.
func (c *sourceCap) countOverLimit(source string, n int) {
	if c.overLimit != nil && n > 0 {
		c.overLimit.WithLabelValues(source).Add(float64(n))
	}
}

// admitOne checks that registering id for source keeps the source within
// its cap: a worker the source has already is replaced, a new one needs
// room. Guarded by mu.
func (r *Registry) admitOne(cur map[string]*Worker, source, id string) error {
	if w := cur[id]; w != nil && w.Source == source {
		return nil
	}
	n := 0
	for _, w := range cur {
		if w.Source == source {
			n++
		}
	}
	if n < r.limit.cap() {
		return nil
	}
	r.limit.countOverLimit(source, 1)
	return fmt.Errorf("%w: worker %s refused, source %s has its %d workers (the sidecar's %s sets the cap)",
		ErrSourceFull, id, source, r.limit.cap(), MaxWorkersPerSourceFlag)
}

// capSource keeps at most the cap of a source's specs for Replace: the
// workers the source has registered first, in their order, then new ones
// in theirs, so that a source growing past its cap never pushes out a
// worker in service. It returns the kept specs and their IDs; the rest are
// counted (each once while the source keeps listing it) and logged when
// the set left out changes. Guarded by mu.
func (r *Registry) capSource(cur map[string]*Worker, source string, specs []WorkerSpec) ([]WorkerSpec, map[string]bool) {
	limit := r.limit.cap()
	keep := make(map[string]bool, min(len(specs), limit))
	if len(specs) > limit {
		for _, s := range specs {
			if w := cur[s.ID]; w != nil && w.Source == source && len(keep) < limit {
				keep[s.ID] = true
			}
		}
	}
	for _, s := range specs {
		if len(keep) == limit {
			break
		}
		keep[s.ID] = true
	}
	if len(keep) == len(specs) {
		if len(r.limit.refused[source]) > 0 {
			r.limit.log.Info("Worker source is within its cap again", "source", source, "workers", len(specs), "cap", limit)
			delete(r.limit.refused, source)
		}
		return specs, keep
	}
	kept := make([]WorkerSpec, 0, limit)
	refused := make(map[string]bool, len(specs)-limit)
	newly := 0
	for _, s := range specs {
		if keep[s.ID] {
			kept = append(kept, s)
			continue
		}
		refused[s.ID] = true
		if !r.limit.refused[source][s.ID] {
			newly++
		}
	}
	r.limit.countOverLimit(source, newly)
	if newly > 0 || len(refused) != len(r.limit.refused[source]) {
		r.limit.log.Info("Worker source is over its cap; the workers past it are not registered",
			"source", source, "listed", len(specs), "cap", limit, "refused", len(refused), "flag", MaxWorkersPerSourceFlag)
	}
	if r.limit.refused == nil {
		r.limit.refused = map[string]map[string]bool{}
	}
	r.limit.refused[source] = refused
	return kept, keep
}

// registerLimitMetrics registers the counter of workers refused for the
// cap.
func (r *Registry) registerLimitMetrics(reg prometheus.Registerer) {
	r.limit.overLimit = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: dispatchmetrics.Namespace, Name: "workers_over_limit_total",
		Help: "Workers refused because their source (api, file, pods) had " + MaxWorkersPerSourceFlag + " workers already; a source that keeps listing one counts it once.",
	}, []string{"source"})
	reg.MustRegister(r.limit.overLimit)
}
