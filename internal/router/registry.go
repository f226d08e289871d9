package router

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"
)

// CapabilityRouterHint is the capability a worker advertises to receive hints.
const CapabilityRouterHint = core.CapabilityRouterHint

// MaxWorkerIDLength caps a worker ID: a pod name is at most 253 characters.
const MaxWorkerIDLength = 253

// Worker sources: each source replaces only the workers it registered.
const (
	SourceAPI  = "api"
	SourceFile = "file"
	SourcePods = "pods"
)

// WorkerSpec is a worker as a source registers it.
type WorkerSpec struct {
	// ID is the worker ID routers book (the pod name in Kubernetes).
	ID string `json:"id"`
	// Capabilities the worker advertises; router_hint to receive hints.
	Capabilities []string `json:"capabilities,omitempty"`
	// HintEndpoint is the absolute http(s) URL hints are posted to: no
	// credentials, no query, never a link-local or metadata address.
	HintEndpoint string `json:"hint_endpoint,omitempty"`
	// WorkerType is the worker's router_hint_worker_type (aggregated,
	// prefill or decode); informational.
	WorkerType string `json:"worker_type,omitempty"`
}

// Validate reports why the spec cannot be registered, or nil.
func (s *WorkerSpec) Validate() error {
	if s.ID == "" {
		return fmt.Errorf("worker id is required")
	}
	if len(s.ID) > MaxWorkerIDLength {
		return fmt.Errorf("worker id is %d characters, over the %d allowed", len(s.ID), MaxWorkerIDLength)
	}
	if s.HintEndpoint != "" {
		if err := validateHintEndpoint(s.HintEndpoint); err != nil {
			return fmt.Errorf("worker %s: %w", s.ID, err)
		}
	}
	return nil
}

// HintCapable reports whether the spec advertises router_hint.
func (s *WorkerSpec) HintCapable() bool {
	return slices.Contains(s.Capabilities, CapabilityRouterHint)
}

// Worker is a registered worker. It is immutable; a change registers a new
// one.
type Worker struct {
	WorkerSpec
	// Capable is set when the worker advertises router_hint.
	Capable bool `json:"hint_capable"`
	// Source is the source that registered it: api, file or pods.
	Source string `json:"source"`

	// q is the worker's delivery queue: nil when it is not hint-capable,
	// has no endpoint, or the registry has no Delivery.
	q *queue
	// delivery counts what is dropped for want of an endpoint; nil when
	// the registry has no Delivery.
	delivery *Delivery
}

// HintCapable reports whether the worker advertises router_hint.
func (w *Worker) HintCapable() bool { return w.Capable }

// Deliver hands a message to the worker's queue; false if it was dropped.
func (w *Worker) Deliver(msg []byte, built time.Time) bool {
	if w.q == nil {
		if w.delivery != nil {
			w.delivery.metrics.dropNoEP.Inc()
		}
		return false
	}
	return w.q.enqueue(msg, built)
}

// Registry is the set of workers that bookings may name. Lookups are on the
// booking path and take no lock: the map is replaced whole on every change,
// which is rare next to bookings.
type Registry struct {
	delivery *Delivery
	mu       sync.Mutex // serialises writers
	workers  atomic.Pointer[map[string]*Worker]
}

// NewRegistry returns an empty registry whose hint-capable workers get a
// queue in delivery. With a nil delivery, hints are built but not sent.
func NewRegistry(delivery *Delivery) *Registry {
	r := &Registry{delivery: delivery}
	empty := map[string]*Worker{}
	r.workers.Store(&empty)
	return r
}

func (r *Registry) lookup(id string) *Worker { return (*r.workers.Load())[id] }

// Lookup returns the worker for the dispatcher, or nil.
func (r *Registry) Lookup(id string) core.Worker {
	if w := r.lookup(id); w != nil {
		return w
	}
	return nil // a nil *Worker would be a non-nil core.Worker
}

// Get returns a registered worker.
func (r *Registry) Get(id string) (Worker, bool) {
	w := r.lookup(id)
	if w == nil {
		return Worker{}, false
	}
	return *w, true
}

// List returns the workers, sorted by ID.
func (r *Registry) List() []Worker {
	m := *r.workers.Load()
	out := make([]Worker, 0, len(m))
	for _, w := range m {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Set registers or replaces one worker for a source.
func (r *Registry) Set(source string, spec WorkerSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.copyMap()
	r.put(next, source, spec)
	r.workers.Store(&next)
	return nil
}

// Delete removes one worker; it reports whether it was there.
func (r *Registry) Delete(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.copyMap()
	old, ok := next[id]
	if !ok {
		return false
	}
	delete(next, id)
	r.workers.Store(&next)
	if old.q != nil {
		old.q.close()
	}
	r.forget(id)
	return true
}

// Replace makes specs the complete set of workers of one source, leaving
// the other sources' workers alone. An invalid spec fails the whole call.
func (r *Registry) Replace(source string, specs []WorkerSpec) error {
	seen := make(map[string]bool, len(specs))
	for i := range specs {
		if err := specs[i].Validate(); err != nil {
			return err
		}
		if seen[specs[i].ID] {
			return fmt.Errorf("worker %s is listed twice", specs[i].ID)
		}
		seen[specs[i].ID] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.copyMap()
	for id, w := range next {
		if w.Source == source && !seen[id] {
			delete(next, id)
			if w.q != nil {
				w.q.close()
			}
			r.forget(id)
		}
	}
	for _, s := range specs {
		r.put(next, source, s)
	}
	r.workers.Store(&next)
	return nil
}

// put registers spec in next, keeping the previous entry's queue when the
// endpoint did not change: its hints and its connection stay valid.
func (r *Registry) put(next map[string]*Worker, source string, spec WorkerSpec) {
	spec.Capabilities = slices.Clone(spec.Capabilities)
	w := &Worker{WorkerSpec: spec, Capable: spec.HintCapable(), Source: source, delivery: r.delivery}
	old := next[spec.ID]
	wantQueue := w.Capable && spec.HintEndpoint != "" && r.delivery != nil
	switch {
	case wantQueue && old != nil && old.q != nil && old.HintEndpoint == spec.HintEndpoint:
		w.q = old.q
	case wantQueue:
		w.q = r.delivery.newQueue(spec.ID, spec.HintEndpoint)
	}
	if old != nil && old.q != nil && old.q != w.q {
		old.q.close()
	}
	next[spec.ID] = w
}

// forget drops the per-worker series of a worker that left.
func (r *Registry) forget(id string) {
	if r.delivery != nil {
		r.delivery.metrics.forgetWorker(id)
	}
}

func (r *Registry) copyMap() map[string]*Worker {
	cur := *r.workers.Load()
	next := make(map[string]*Worker, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	return next
}

// QueuedHints counts the hints waiting in every worker's queue.
func (r *Registry) QueuedHints() int {
	n := 0
	for _, w := range *r.workers.Load() {
		if w.q != nil {
			n += len(w.q.ch)
		}
	}
	return n
}

// Stats counts the registered workers and the hint-capable ones.
func (r *Registry) Stats() (workers, hintCapable int) {
	for _, w := range *r.workers.Load() {
		workers++
		if w.Capable {
			hintCapable++
		}
	}
	return workers, hintCapable
}
