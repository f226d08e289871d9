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

// Worker is one registered worker. Its methods are on the booking path:
// they must not block and should not allocate.
type Worker interface {
	// HintCapable reports whether the worker advertises router_hint; the
	// dispatcher runs no policy for a worker that does not.
	HintCapable() bool
	// InPool reports whether the worker is in role's worker pool (the
	// workers a RouterRole's workerSelector picks). A role without a pool
	// admits every worker. The dispatcher runs no policy of a role for a
	// worker outside its pool: a prefill hint never reaches a decode
	// worker.
	InPool(role string) bool
	// SourceEndpoint returns the KV control endpoint the worker advertises
	// for a data-parallel rank (router_hint_source_control_endpoints), for
	// bookings whose committed copy names this worker as its source
	// without an endpoint. ok is false when it advertises none for rank.
	SourceEndpoint(rank int) (endpoint string, ok bool)
	// Deliver hands an encoded hint to the worker's delivery, without
	// waiting for it to be sent, and reports whether it was accepted. built
	// is when the hint was built, for delivery to drop stale hints. Book
	// calls it; Build does not.
	Deliver(msg []byte, built time.Time) bool
}

// TopologyWorker is a Worker that publishes the topology domain its KV
// blocks move within (Dynamo's kv_transfer_domain and
// kv_transfer_enforcement). The dispatcher asks a booked worker for it
// when the booking commits a copy: under KVTransferRequired a copy whose
// source worker is not in the same domain is dropped before any policy
// runs (counted under the outside_domain reason), so no kv.fetch crosses
// the domain, whichever hint policy the role runs. Under
// KVTransferPreferred the copy is kept: a booking commits one source, and
// the worker-selection policy that chose it is where in-domain sources are
// preferred.
type TopologyWorker interface {
	Worker
	// KVTransferDomain returns the worker's domain ("" for none) and its
	// enforcement (KVTransferRequired or KVTransferPreferred).
	KVTransferDomain() (domain, enforcement string)
}

// Enforcements of a worker's KV transfer domain.
const (
	KVTransferRequired  = "required"
	KVTransferPreferred = "preferred"
)

// CapabilityRouterHint is the capability a worker advertises to receive hints.
const CapabilityRouterHint = "router_hint"

// Worker types a worker advertises as router_hint_worker_type.
const (
	WorkerTypeAggregated = "aggregated"
	WorkerTypePrefill    = "prefill"
	WorkerTypeDecode     = "decode"
)

// StaticWorkers is a fixed set of workers for routers that know their
// workers themselves and send hints in-band (see Dispatcher.Build): each ID
// maps to whether the worker advertises router_hint. Every worker is in
// every role's pool and advertises no source endpoint; Deliver accepts
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

func (w staticWorker) HintCapable() bool               { return bool(w) }
func (staticWorker) InPool(string) bool                { return true }
func (staticWorker) SourceEndpoint(int) (string, bool) { return "", false }
func (staticWorker) Deliver([]byte, time.Time) bool    { return false }
