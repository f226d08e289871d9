package dispatch

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

// TopologyWorker is a Worker that publishes its place in the cluster's
// topology and the domain its KV transfers stay within, as a Dynamo
// worker does (ModelRuntimeConfig's topology_domains, kv_transfer_domain,
// kv_transfer_enforcement and kv_transfer_preferred_weight). The
// dispatcher asks a booked worker for it when the booking commits a copy.
// Under KVTransferRequired the copy is fetched only from a source worker
// with the same value in the booked worker's transfer domain (the same
// zone, when the domain is zone): any other copy, from a source that
// publishes another value, none, or is not registered, is dropped before
// any policy runs (counted under the outside_domain reason), so no
// kv.fetch crosses the domain, whichever hint policy the role runs. A
// source may publish several domains (zone and rack); only the booked
// worker's transfer domain is compared. Under KVTransferPreferred the
// copy is kept: a booking commits one source, and the preference (its
// weight) is the worker-selection policy's, which chose that source.
type TopologyWorker interface {
	Worker
	// TopologyDomain returns the worker's value in the named topology
	// domain (topology_domains[name], such as "us-east-1a" for "zone"),
	// and false when it publishes none there.
	TopologyDomain(name string) (value string, ok bool)
	// KVTransferPolicy returns the name of the domain the worker's KV
	// transfers stay within (kv_transfer_domain; "" for none), its
	// enforcement (KVTransferRequired or KVTransferPreferred) and, under
	// KVTransferPreferred, the preference's weight in [0, 1]
	// (kv_transfer_preferred_weight; 0 under KVTransferRequired).
	KVTransferPolicy() (domain, enforcement string, preferredWeight float64)
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
