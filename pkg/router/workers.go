package router

import "time"

// Workers is the dispatcher's view of the worker registry: the sidecar's
// registry (pods, a file, the HTTP API) or a router's own list of workers.
// Lookup is on the booking path: it must not block and should not allocate.
type Workers interface {
	// Lookup returns the worker routers book under id, or nil when none is
	// registered.
	Lookup(id string) Worker
}

// Worker is one registered worker.
type Worker interface {
	// HintCapable reports whether the worker advertises router_hint; the
	// dispatcher runs no policy for a worker that does not.
	HintCapable() bool
	// Deliver hands an encoded hint to the worker's delivery, without
	// waiting for it to be sent, and reports whether it was accepted. built
	// is when the hint was built, for delivery to drop stale hints. Book
	// calls it; Build does not.
	Deliver(msg []byte, built time.Time) bool
}

// CapabilityRouterHint is the capability a worker advertises to receive hints.
const CapabilityRouterHint = "router_hint"

// StaticWorkers is a fixed set of workers for routers that know their
// workers themselves and send hints in-band (see Dispatcher.Build): each ID
// maps to whether the worker advertises router_hint. Deliver accepts
// nothing. It is safe for concurrent reads; replace it whole to change it.
type StaticWorkers map[string]bool

// Lookup returns the worker, or nil.
func (s StaticWorkers) Lookup(id string) Worker {
	capable, ok := s[id]
	switch {
	case !ok:
		return nil
	case capable:
		return staticWorker(true)
	}
	return staticWorker(false)
}

type staticWorker bool

func (w staticWorker) HintCapable() bool            { return bool(w) }
func (staticWorker) Deliver([]byte, time.Time) bool { return false }
