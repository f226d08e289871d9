// Package workers is the worker registry: the workers bookings may name,
// with their capabilities, worker type, source control endpoints and pool
// membership, from the HTTP API, a workers file or worker pods. It is the
// dispatcher's Workers (pkg/dispatch). It knows delivery only through the
// Delivery interface below.
//
// It imports pkg/dispatch, pkg/wellknown, endpoint (the hint endpoint
// checks), filewatch, jsonbody, internal/apiwatch, client-go and
// Prometheus; never delivery.
package workers

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// MaxWorkerIDLength caps a worker ID: a pod name is at most 253 characters.
const MaxWorkerIDLength = 253

// ValidateWorkerID checks a worker ID: valid UTF-8, 1 to MaxWorkerIDLength
// bytes of ASCII letters, digits, '-', '.' and '_', starting and ending
// with a letter or digit. Every pod name is one; so are the IDs routers
// give standalone workers. An ID is shown in logs, listings and metric
// labels, so control characters, bidirectional marks and invalid UTF-8
// have no place in it.
func ValidateWorkerID(id string) error {
	switch {
	case id == "":
		return errors.New("worker id is required")
	case !utf8.ValidString(id):
		return fmt.Errorf("worker id %q is not valid UTF-8", id)
	case len(id) > MaxWorkerIDLength:
		return fmt.Errorf("worker id is %d bytes, over the %d allowed", len(id), MaxWorkerIDLength)
	}
	for i, c := range id {
		if !idChar(c) {
			return fmt.Errorf("worker id %q has %q at byte %d: an id holds ASCII letters, digits, '-', '.' and '_' only", id, c, i)
		}
	}
	if !alnum(rune(id[0])) || !alnum(rune(id[len(id)-1])) {
		return fmt.Errorf("worker id %q must start and end with a letter or digit", id)
	}
	return nil
}

func alnum(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func idChar(c rune) bool { return alnum(c) || c == '-' || c == '.' || c == '_' }

// ErrOtherSource is the refusal to replace or remove a worker another
// source registered: a registration over the API never takes the place of
// a pod's or the workers file's worker of the same ID.
var ErrOtherSource = errors.New("registered by another source")

// ErrNotRegistered is Delete's answer for an ID nobody registered.
var ErrNotRegistered = errors.New("not registered")

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
	// WorkerType is the worker's router_hint_worker_type: aggregated,
	// prefill or decode, or empty when it advertises none. Any other value
	// is refused.
	WorkerType string `json:"worker_type,omitempty"`
	// SourceControlEndpoints are the worker's
	// router_hint_source_control_endpoints: its KV control endpoint per
	// data-parallel rank ("0", "1", ...). A booking whose committed copy
	// names this worker as its source, without an endpoint, gets the one
	// of its rank.
	SourceControlEndpoints map[string]string `json:"source_control_endpoints,omitempty"`
	// Labels are the worker's labels (a pod's own), which the roles'
	// worker selectors match to build their pools.
	Labels map[string]string `json:"labels,omitempty"`
	// TopologyDomains are the worker's topology_domains: its value in each
	// topology domain it publishes, by the domain's name, such as
	// {"zone": "us-east-1a", "rack": "rack-22"}. Names are DNS labels
	// (Dynamo's TopologyDomain), values label values (they come from node
	// labels).
	TopologyDomains map[string]string `json:"topology_domains,omitempty"`
	// KVTransferDomain is its kv_transfer_domain: the name of the domain,
	// one of TopologyDomains, its KV transfers stay within; empty for
	// none.
	KVTransferDomain string `json:"kv_transfer_domain,omitempty"`
	// KVTransferEnforcement is its kv_transfer_enforcement: required (a
	// committed copy from a source with another value in the domain, or
	// none, is dropped) or preferred (kept); empty means required, as
	// Dynamo's workers publish it when their policy gives none. It needs
	// a domain.
	KVTransferEnforcement string `json:"kv_transfer_enforcement,omitempty"`
	// KVTransferPreferredWeight is its kv_transfer_preferred_weight, in
	// [0, 1]: required under preferred enforcement, refused under
	// required, as Dynamo's router and its DGD schema have it.
	KVTransferPreferredWeight *float64 `json:"kv_transfer_preferred_weight,omitempty"`
}

// MaxTopologyDomains caps the topology domains a worker publishes.
const MaxTopologyDomains = 16

// validateTopology checks a worker's topology domains and KV transfer
// policy, with Dynamo's words where it has them.
func validateTopology(s *WorkerSpec) error {
	if len(s.TopologyDomains) > MaxTopologyDomains {
		return fmt.Errorf("topology_domains has %d domains, over the %d allowed", len(s.TopologyDomains), MaxTopologyDomains)
	}
	for _, name := range slices.Sorted(maps.Keys(s.TopologyDomains)) {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return fmt.Errorf("topology_domains: domain name %q: %s", name, strings.Join(errs, "; "))
		}
		v := s.TopologyDomains[name]
		if v == "" {
			return fmt.Errorf("topology_domains: domain %s has an empty value", name)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("topology_domains: domain %s value %q: %s", name, v, strings.Join(errs, "; "))
		}
	}
	domain, enforcement, w := s.KVTransferDomain, s.KVTransferEnforcement, s.KVTransferPreferredWeight
	switch {
	case enforcement != "" && enforcement != dispatch.KVTransferRequired && enforcement != dispatch.KVTransferPreferred:
		return fmt.Errorf("kv_transfer_enforcement %q: want %s or %s", enforcement, dispatch.KVTransferRequired, dispatch.KVTransferPreferred)
	case domain == "" && enforcement != "":
		return fmt.Errorf("kv_transfer_enforcement %q without a kv_transfer_domain", enforcement)
	case domain == "" && w != nil:
		return errors.New("kv_transfer_preferred_weight without a kv_transfer_domain")
	case domain == "":
		return nil
	}
	if _, ok := s.TopologyDomains[domain]; !ok {
		known := strings.Join(slices.Sorted(maps.Keys(s.TopologyDomains)), ", ")
		if known == "" {
			known = "none"
		}
		return fmt.Errorf("kv_transfer_domain=%q, but topology_domains does not contain that domain (it has: %s)", domain, known)
	}
	switch {
	case enforcement == dispatch.KVTransferPreferred && w == nil:
		return fmt.Errorf("kv_transfer_enforcement preferred for domain %q, but kv_transfer_preferred_weight is missing (a weight in [0, 1])", domain)
	case enforcement != dispatch.KVTransferPreferred && w != nil:
		return fmt.Errorf("kv_transfer_preferred_weight is set, but kv_transfer_enforcement is %s: the weight is only for preferred", cmp.Or(enforcement, dispatch.KVTransferRequired+" (the default)"))
	case w != nil && !(*w >= 0 && *w <= 1):
		return fmt.Errorf("kv_transfer_preferred_weight %v: want a number in [0, 1]", *w)
	}
	return nil
}

// Limits on what a worker advertises.
const (
	// MaxSourceRanks caps the data-parallel ranks a worker advertises
	// endpoints for; ranks run from 0 to MaxSourceRanks-1.
	MaxSourceRanks = 1024
)

// validateWorkerType checks a router_hint_worker_type.
func validateWorkerType(t string) error {
	switch t {
	case "", dispatch.WorkerTypeAggregated, dispatch.WorkerTypePrefill, dispatch.WorkerTypeDecode:
		return nil
	}
	return fmt.Errorf("worker_type %q is not a router_hint_worker_type: want %s, %s or %s",
		t, dispatch.WorkerTypeAggregated, dispatch.WorkerTypePrefill, dispatch.WorkerTypeDecode)
}

// sourceEndpoints checks the advertised endpoints and returns them indexed
// by rank ("" where a rank has none).
func sourceEndpoints(m map[string]string) ([]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if len(m) > MaxSourceRanks {
		return nil, fmt.Errorf("source_control_endpoints lists %d ranks, over the %d allowed", len(m), MaxSourceRanks)
	}
	top := -1
	ranks := make(map[int]string, len(m))
	for k, ep := range m {
		r, err := strconv.Atoi(k)
		if err != nil || r < 0 || r >= MaxSourceRanks || strconv.Itoa(r) != k {
			return nil, fmt.Errorf("source_control_endpoints: rank %q must be a data-parallel rank from 0 to %d", k, MaxSourceRanks-1)
		}
		switch {
		case ep == "":
			return nil, fmt.Errorf("source_control_endpoints: rank %d has an empty endpoint", r)
		case len(ep) > dispatch.MaxSourceEndpointBytes:
			return nil, fmt.Errorf("source_control_endpoints: rank %d's endpoint is %d bytes, over the %d allowed", r, len(ep), dispatch.MaxSourceEndpointBytes)
		case strings.ContainsFunc(ep, func(c rune) bool { return c < 0x20 || c == 0x7f || c == utf8.RuneError }):
			return nil, fmt.Errorf("source_control_endpoints: rank %d's endpoint %q has control characters or invalid UTF-8", r, ep)
		}
		ranks[r] = ep
		top = max(top, r)
	}
	out := make([]string, top+1)
	for r, ep := range ranks {
		out[r] = ep
	}
	return out, nil
}

// validateLabels checks labels as the API server checks a pod's.
func validateLabels(m map[string]string) error {
	for k, v := range m {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %s", k, v, strings.Join(errs, "; "))
		}
	}
	return nil
}

// Validate reports why the spec cannot be registered, or nil.
func (s *WorkerSpec) Validate() error {
	if err := ValidateWorkerID(s.ID); err != nil {
		return err
	}
	if s.HintEndpoint != "" {
		if err := endpoint.ValidateHintEndpoint(s.HintEndpoint); err != nil {
			return fmt.Errorf("worker %s: %w", s.ID, err)
		}
	}
	if err := validateWorkerType(s.WorkerType); err != nil {
		return fmt.Errorf("worker %s: %w", s.ID, err)
	}
	if _, err := sourceEndpoints(s.SourceControlEndpoints); err != nil {
		return fmt.Errorf("worker %s: %w", s.ID, err)
	}
	if err := validateLabels(s.Labels); err != nil {
		return fmt.Errorf("worker %s: %w", s.ID, err)
	}
	if err := validateTopology(s); err != nil {
		return fmt.Errorf("worker %s: %w", s.ID, err)
	}
	return nil
}

// HintCapable reports whether the spec advertises router_hint.
func (s *WorkerSpec) HintCapable() bool {
	return slices.Contains(s.Capabilities, dispatch.CapabilityRouterHint)
}

// Worker is a registered worker. It is immutable; a change registers a new
// one.
type Worker struct {
	WorkerSpec
	// Capable is set when the worker advertises router_hint.
	Capable bool `json:"hint_capable"`
	// Source is the source that registered it: api, file or pods.
	Source string `json:"source"`
	// InPools lists the roles whose worker pools the worker is in.
	InPools []string `json:"pools,omitempty"`
	// CandidatePools lists the roles whose worker pools the worker is in
	// under a staged candidate's worker selectors, while one is staged.
	CandidatePools []string `json:"candidate_pools,omitempty"`

	// q is the worker's delivery queue: nil when it is not hint-capable,
	// has no endpoint, or the registry has no Delivery.
	q Queue
	// delivery counts what is dropped for want of an endpoint; nil when
	// the registry has no Delivery.
	delivery Delivery
	// sources are the source control endpoints by rank.
	sources []string
	// pools holds an entry for every role of the pools in force: whether
	// the worker is in it. Nil while no pools are in force (a policy file
	// on its own), when every role admits every worker.
	pools map[string]bool
	// candPools is pools under the staged candidate's selectors; nil
	// while no candidate's are in force, when the candidate sees pools.
	candPools map[string]bool
}

// HintCapable reports whether the worker advertises router_hint.
func (w *Worker) HintCapable() bool { return w.Capable }

// TopologyDomain returns the worker's value in the named topology
// domain, for dispatch.TopologyWorker.
func (w *Worker) TopologyDomain(name string) (string, bool) {
	v, ok := w.TopologyDomains[name]
	return v, ok
}

// KVTransferPolicy returns the worker's KV transfer domain, its
// enforcement (required where it gives none) and its preferred weight,
// for dispatch.TopologyWorker.
func (w *Worker) KVTransferPolicy() (domain, enforcement string, preferredWeight float64) {
	if w.KVTransferDomain == "" {
		return "", "", 0
	}
	if w.KVTransferPreferredWeight != nil {
		preferredWeight = *w.KVTransferPreferredWeight
	}
	return w.KVTransferDomain, cmp.Or(w.KVTransferEnforcement, dispatch.KVTransferRequired), preferredWeight
}

// InPool reports whether the worker is in role's pool. While pools are in
// force, a role without one admits no worker: a role the pools miss fails
// closed. A role that takes every worker has a pool that selects
// everything.
func (w *Worker) InPool(role string) bool {
	if w.pools == nil {
		return true
	}
	return w.pools[role]
}

// Pools lists the roles whose pools the worker is in, sorted.
func (w *Worker) Pools() []string { return rolesIn(w.pools) }

// rolesIn lists the roles a membership admits, sorted.
func rolesIn(m map[string]bool) []string {
	var out []string
	for role, in := range m {
		if in {
			out = append(out, role)
		}
	}
	slices.Sort(out)
	return out
}

// candidateWorker is a worker as a staged candidate's dispatcher sees it:
// in the candidate's pools. One pointer wide, it becomes a
// dispatch.Worker without an allocation, so a canary booking costs what a
// stable one does.
type candidateWorker struct{ *Worker }

// InPool reports whether the worker is in role's pool under the
// candidate's worker selectors, or the stable config's while the
// candidate has none in force.
func (c candidateWorker) InPool(role string) bool {
	if c.candPools == nil {
		return c.Worker.InPool(role)
	}
	return c.candPools[role]
}

// candidateView is the registry as a staged candidate's dispatcher sees
// it (Registry.Candidate).
type candidateView struct{ r *Registry }

// Lookup returns the worker in the candidate's pools, or nil.
func (v candidateView) Lookup(id string) dispatch.Worker {
	if w := v.r.lookup(id); w != nil {
		return candidateWorker{w}
	}
	return nil
}

// SourceEndpoint returns the control endpoint the worker advertises for a
// data-parallel rank.
func (w *Worker) SourceEndpoint(rank int) (string, bool) {
	if rank < 0 || rank >= len(w.sources) || w.sources[rank] == "" {
		return "", false
	}
	return w.sources[rank], true
}

// Deliver hands a message to the worker's queue; false if it was dropped.
func (w *Worker) Deliver(msg []byte, built time.Time) bool {
	if w.q == nil {
		if w.delivery != nil {
			w.delivery.NoEndpoint()
		}
		return false
	}
	return w.q.Enqueue(msg, built)
}

// Delivery is what the registry needs of delivery: a queue for each
// hint-capable worker with an endpoint, a count of the hints of one
// without, and the end of a departed worker's per-worker metrics.
type Delivery interface {
	// Queue starts the queue and sender of a worker's endpoint.
	Queue(worker, endpoint string) Queue
	// NoEndpoint counts a hint dropped because its worker advertises
	// router_hint but no endpoint.
	NoEndpoint()
	// Forget drops the per-worker metrics of a worker that left.
	Forget(worker string)
}

// Queue is one worker's delivery queue.
type Queue interface {
	// Enqueue hands a message over without waiting; false if it was
	// dropped.
	Enqueue(msg []byte, built time.Time) bool
	// Close stops the queue of a worker that left or changed endpoint.
	Close()
}

// Registry is the set of workers that bookings may name. Lookups are on the
// booking path and take no lock: the map is replaced whole on every change,
// which is rare next to bookings.
type Registry struct {
	delivery Delivery
	mu       sync.Mutex // serialises writers
	workers  atomic.Pointer[map[string]*Worker]
	// pools are the roles' worker selectors; nil while none are in force.
	// Guarded by mu.
	pools map[string]labels.Selector
	// candPools are a staged candidate's; nil while none are in force.
	// Guarded by mu.
	candPools map[string]labels.Selector
	// Endpoints are the hint endpoint rules every registration is held
	// to, whatever its source; nil holds them to the rules that always
	// hold (endpoint.ValidateHintEndpoint). Set before the first
	// registration.
	Endpoints *endpoint.Policy
	// refused counts registrations refused as invalid, by source; nil
	// counts nothing.
	refused *prometheus.CounterVec
	// limit caps each source's workers (limit.go).
	limit sourceCap
}

// NewRegistry returns an empty registry whose hint-capable workers get a
// queue in delivery. With a nil delivery, hints are built but not sent.
func NewRegistry(delivery Delivery) *Registry {
	r := &Registry{delivery: delivery}
	empty := map[string]*Worker{}
	r.workers.Store(&empty)
	return r
}

func (r *Registry) lookup(id string) *Worker { return (*r.workers.Load())[id] }

// Lookup returns the worker for the dispatcher, or nil.
func (r *Registry) Lookup(id string) dispatch.Worker {
	if w := r.lookup(id); w != nil {
		return w
	}
	return nil // a nil *Worker would be a non-nil dispatch.Worker
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

// check validates a spec and holds its endpoint to the registry's rules.
func (r *Registry) check(spec *WorkerSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.HintEndpoint != "" && r.Endpoints != nil {
		if err := r.Endpoints.Check(spec.HintEndpoint); err != nil {
			return fmt.Errorf("worker %s: %w", spec.ID, err)
		}
	}
	return nil
}

// otherSource is the refusal of a change by source to a worker another
// source registered, or nil. Guarded by mu.
func otherSource(next map[string]*Worker, source, id string) error {
	if old, ok := next[id]; ok && old.Source != source && !outranks(source, old.Source) {
		return fmt.Errorf("worker %s is %w (%s), not %s", id, ErrOtherSource, old.Source, source)
	}
	return nil
}

// outranks reports whether source takes an ID from other: the workers
// file, the operator's own configuration, takes it from a registration
// over the API, so that a PUT can never make the file's reloads fail; the
// API's entry is dropped.
func outranks(source, other string) bool {
	return source == SourceFile && other == SourceAPI
}

// HeldByOther reports whether another source than source registered id.
func (r *Registry) HeldByOther(source, id string) bool {
	w := r.lookup(id)
	return w != nil && w.Source != source
}

// Set registers or replaces one worker for a source. A worker of the same
// ID from another source stays: the call fails with ErrOtherSource.
func (r *Registry) Set(source string, spec WorkerSpec) error {
	if err := r.check(&spec); err != nil {
		r.countRefused(source)
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admitOne(*r.workers.Load(), source, spec.ID); err != nil {
		return err
	}
	next := r.copyMap()
	if err := otherSource(next, source, spec.ID); err != nil {
		r.countRefused(source)
		return err
	}
	r.put(next, source, spec)
	r.workers.Store(&next)
	return nil
}

// Delete removes one worker of a source: ErrNotRegistered when no worker
// has the ID, ErrOtherSource when another source registered it (it
// stays).
func (r *Registry) Delete(source, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.copyMap()
	old, ok := next[id]
	if !ok {
		return fmt.Errorf("worker %q is %w", id, ErrNotRegistered)
	}
	if err := otherSource(next, source, id); err != nil {
		return err
	}
	delete(next, id)
	r.workers.Store(&next)
	if old.q != nil {
		old.q.Close()
	}
	r.forget(id)
	return nil
}

// Replace makes specs the complete set of workers of one source, leaving
// the other sources' workers alone. It is all or nothing: an invalid spec,
// an ID listed twice or one another source registered fails the whole
// call, and the error names every such entry by its place in specs
// (workers[i]). The caller counts the refusal: a file reread many times
// is one refusal.
func (r *Registry) Replace(source string, specs []WorkerSpec) error {
	seen := make(map[string]bool, len(specs))
	var errs []error
	for i := range specs {
		if err := r.check(&specs[i]); err != nil {
			errs = append(errs, fmt.Errorf("workers[%d]: %w", i, err))
			continue
		}
		if seen[specs[i].ID] {
			errs = append(errs, fmt.Errorf("workers[%d]: worker %s is listed twice", i, specs[i].ID))
		}
		seen[specs[i].ID] = true
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.copyMap()
	for i, s := range specs {
		if err := otherSource(next, source, s.ID); err != nil {
			errs = append(errs, fmt.Errorf("workers[%d]: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, s := range specs {
		if old, ok := next[s.ID]; ok && old.Source != source {
			// An entry of a source this one outranks (otherSource let it
			// through): put replaces it, and its queue closes there.
			r.limit.log.Info("Worker registered over the API is taken over by the workers file", "worker", s.ID, "from", old.Source, "to", source)
			r.forget(s.ID)
		}
	}
	specs, seen = r.capSource(next, source, specs)
	for id, w := range next {
		if w.Source == source && !seen[id] {
			delete(next, id)
			if w.q != nil {
				w.q.Close()
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
	spec.Labels = maps.Clone(spec.Labels)
	spec.SourceControlEndpoints = maps.Clone(spec.SourceControlEndpoints)
	w := &Worker{WorkerSpec: spec, Capable: spec.HintCapable(), Source: source, delivery: r.delivery}
	w.sources, _ = sourceEndpoints(spec.SourceControlEndpoints) // validated by the caller
	r.placeInPools(w)
	old := next[spec.ID]
	wantQueue := w.Capable && spec.HintEndpoint != "" && r.delivery != nil
	switch {
	case wantQueue && old != nil && old.q != nil && old.HintEndpoint == spec.HintEndpoint:
		w.q = old.q
	case wantQueue:
		w.q = r.delivery.Queue(spec.ID, spec.HintEndpoint)
	}
	if old != nil && old.q != nil && old.q != w.q {
		old.q.Close()
	}
	next[spec.ID] = w
}

// countRefused counts a registration refused as invalid.
func (r *Registry) countRefused(source string) {
	if r.refused != nil {
		r.refused.WithLabelValues(source).Inc()
	}
}

// membership is which of pools a worker with these labels is in; nil
// for nil pools.
func membership(pools map[string]labels.Selector, l map[string]string) map[string]bool {
	if pools == nil {
		return nil
	}
	m := make(map[string]bool, len(pools))
	for role, sel := range pools {
		m[role] = sel.Matches(labels.Set(l))
	}
	return m
}

// placeInPools sets w's membership of the pools in force, the stable
// config's and the candidate's. Guarded by mu.
func (r *Registry) placeInPools(w *Worker) {
	w.pools, w.candPools = membership(r.pools, w.Labels), membership(r.candPools, w.Labels)
	w.InPools, w.CandidatePools = rolesIn(w.pools), rolesIn(w.candPools)
}

// SetPools makes pools the roles' worker pools: role to the selector of
// its workers. A role absent admits no worker (labels.Everything admits
// every one); nil pools put none in force, and every role admits every
// worker. Every registered worker's membership is recomputed at once.
func (r *Registry) SetPools(pools map[string]labels.Selector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pools = maps.Clone(pools) // nil stays nil
	r.replacePlaced()
}

// SetCandidatePools makes pools a staged candidate's worker pools, which
// Candidate's workers are in, as SetPools does for the stable config's;
// nil drops them (no candidate staged), and the candidate's bookings see
// the stable config's pools.
func (r *Registry) SetCandidatePools(pools map[string]labels.Selector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.candPools = maps.Clone(pools)
	r.replacePlaced()
}

// Candidate returns the registry as a staged candidate's dispatcher sees
// it: the same workers, queues and endpoints, each in the pools of the
// candidate's worker selectors (SetCandidatePools), so that a canary
// books the workers its own RouterRoles pick.
func (r *Registry) Candidate() dispatch.Workers { return candidateView{r} }

// replacePlaced replaces every worker with a copy placed in the pools in
// force: workers are immutable, as bookings read them without a lock.
// Guarded by mu.
func (r *Registry) replacePlaced() {
	cur := *r.workers.Load()
	next := make(map[string]*Worker, len(cur))
	for id, w := range cur {
		c := *w
		r.placeInPools(&c)
		next[id] = &c
	}
	r.workers.Store(&next)
}

// Pools returns the roles' worker selectors in force.
func (r *Registry) Pools() map[string]labels.Selector {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.pools)
}

// forget drops the per-worker series of a worker that left.
func (r *Registry) forget(id string) {
	if r.delivery != nil {
		r.delivery.Forget(id)
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

// RegisterMetrics registers the registry's metrics in reg: the refused
// registrations, and the gauges read from the registry at scrape time.
func (r *Registry) RegisterMetrics(reg prometheus.Registerer) {
	ns := dispatchmetrics.Namespace
	r.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "workers_refused_total",
		Help: "Worker registrations refused (a worker type other than aggregated, prefill or decode, bad source endpoints, a refused hint endpoint, topology domains or a KV transfer policy that break their rules, an ID another source registered), by source (api, file, pods).",
	}, []string{"source"})
	r.registerLimitMetrics(reg)
	reg.MustRegister(
		r.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "workers",
			Help: "Workers in the registry.",
		}, func() float64 { n, _ := r.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "hint_capable_workers",
			Help: "Workers in the registry that advertise router_hint.",
		}, func() float64 { _, n := r.Stats(); return float64(n) }),
	)
}
