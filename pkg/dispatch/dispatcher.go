package dispatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

// DefaultPolicyDeadline is how long one hint policy may run on a booking,
// before the budget it gets per block of a committed copy, without counting
// as an overrun. A run past it keeps its actions; a policy that may block
// and overruns again and again is ejected (see IsolationOptions).
const DefaultPolicyDeadline = time.Millisecond

// DefaultPolicyDeadlinePerBlock is the time a policy that reads the
// committed copy (it declares KVCopy) gets on top of its deadline for each
// block of the copy: its work grows with the copy (kv-fetch writes every
// hash, about 20-25 ns each on the development machine), and a fixed
// deadline would drop the long prompts' fetches, which matter most. 1 µs a
// block is some 40 times kv-fetch's cost, room for a busy machine's
// preemptions: 9.2 ms for a copy of 8,192 blocks.
const DefaultPolicyDeadlinePerBlock = time.Microsecond

// failureLogInterval is the least time between two logs of one policy's
// failures; every failure is counted regardless.
const failureLogInterval = 10 * time.Second

// Options configure a Dispatcher.
type Options struct {
	// Catalog holds the policy types configs may use.
	Catalog *hints.Catalog
	// Workers is the registry bookings look the booked worker up in; Book
	// hands hints to the worker it returns. Nil knows no worker.
	Workers Workers
	// Metrics receives the dispatcher's metrics (see Metrics); nil
	// reports none, at no cost.
	Metrics Metrics
	// PolicyDeadline is how long one policy may run on one booking before
	// the run counts as an overrun (its actions are kept); 0 means
	// DefaultPolicyDeadline.
	PolicyDeadline time.Duration
	// PolicyDeadlinePerBlock is added to the deadline, and to the hard
	// deadline, of a policy that declares KVCopy for each block of the
	// booking's committed copy; 0 means DefaultPolicyDeadlinePerBlock, a
	// negative value none.
	PolicyDeadlinePerBlock time.Duration
	// Isolation configures the runs of policies that may block (those
	// whose provider does not declare NeverBlocks): the hard deadline a
	// booking waits for them and their ejection.
	Isolation IsolationOptions
	// MaxBookingBytes is the most bytes a committed copy's block hashes
	// may take in decimal; Book refuses a larger copy up front with
	// ErrBookingTooLarge. The payload cap follows it, so that a copy Book
	// accepts is always sent whole. 0 means DefaultMaxBookingBytes. The
	// sidecar sets it, and its request body limit, from --max-booking-bytes.
	MaxBookingBytes int
	// RouterMode is the router's --router-mode: the mode every role of a
	// policy file loaded with Load runs under (LoadConfig carries modes of
	// its own). Empty means kv, the only mode hints run in.
	RouterMode hintsconfig.RouterMode
	// Log receives config and policy-failure logs; the zero Logger discards
	// them.
	Log logr.Logger
}

// Dispatcher turns bookings into hints. It is safe for concurrent use; one
// Dispatcher serves every booking of a sidecar.
type Dispatcher struct {
	cat        *hints.Catalog
	workers    Workers
	metrics    Metrics
	refusals   refusalSeries
	deadline   time.Duration
	perBlock   time.Duration
	maxBooking int
	maxPayload int
	mode       hintsconfig.RouterMode
	log        logr.Logger

	snap    atomic.Pointer[snapshot]
	scratch sync.Pool
	iso     *isolator

	// loadMu serialises Load, so that two sources cannot interleave the
	// check for "unchanged" and the swap.
	loadMu      sync.Mutex
	lastRejects string // hash of the last document refused, to log it once
	onApply     []func(hash string)
}

// NewDispatcher returns a dispatcher with no config: bookings fail with
// ErrNotReady until Load succeeds once.
func NewDispatcher(o Options) *Dispatcher {
	if o.Catalog == nil {
		panic("dispatch.NewDispatcher: Options.Catalog is nil")
	}
	if o.Metrics == nil {
		o.Metrics = nop{}
	}
	if o.PolicyDeadline <= 0 {
		o.PolicyDeadline = DefaultPolicyDeadline
	}
	switch {
	case o.PolicyDeadlinePerBlock == 0:
		o.PolicyDeadlinePerBlock = DefaultPolicyDeadlinePerBlock
	case o.PolicyDeadlinePerBlock < 0:
		o.PolicyDeadlinePerBlock = 0
	}
	if o.MaxBookingBytes <= 0 {
		o.MaxBookingBytes = DefaultMaxBookingBytes
	}
	if o.Workers == nil {
		o.Workers = StaticWorkers(nil)
	}
	d := &Dispatcher{cat: o.Catalog, workers: o.Workers, metrics: o.Metrics, refusals: refusalsOf(o.Metrics), deadline: o.PolicyDeadline,
		perBlock: o.PolicyDeadlinePerBlock, maxBooking: o.MaxBookingBytes, mode: o.RouterMode, log: o.Log}
	// A kv.fetch holds the copy's hashes (at most MaxBookingBytes), an
	// endpoint and its keys; the slack leaves room for both.
	d.iso = &isolator{opts: o.Isolation.withDefaults(), metrics: o.Metrics, outliers: map[string]*outlier{}, d: d}
	d.maxPayload = max(hints.MaxPayloadBytes, o.MaxBookingBytes+payloadSlackBytes)
	d.scratch.New = func() any { return &scratch{arena: make([]byte, 0, payloadArenaBytes)} }
	return d
}

// MaxPayloadBytes is the payload cap the dispatcher enforces: the larger
// of hints.MaxPayloadBytes and its booking limit plus room for a payload's
// keys and endpoint.
func (d *Dispatcher) MaxPayloadBytes() int { return d.maxPayload }

// MaxBookingBytes is the dispatcher's booking limit (Options.MaxBookingBytes).
func (d *Dispatcher) MaxBookingBytes() int { return d.maxBooking }

// payloadSlackBytes is what a payload may hold beyond a copy's hashes: the
// keys, brackets and a source endpoint of up to MaxSourceEndpointBytes.
const payloadSlackBytes = 4 << 10

// payloadArenaBytes is the payload memory a booking's scratch lends its
// policies beyond what its committed copy needs: a kv.fetch of 256 blocks,
// or the small payloads of the other built-ins, fit. A booking with a
// larger copy grows its scratch's arena to fit the copy's kv.fetch, so
// that the payload is written once, in memory the pool reuses.
const payloadArenaBytes = 8 << 10

// arenaFor returns the arena capacity a booking needs: the base plus 21
// bytes (20 digits and a comma) per hash of the copy, and its endpoint.
func arenaFor(c *hints.CommittedCopy) int {
	if c == nil {
		return payloadArenaBytes
	}
	return payloadArenaBytes + 21*len(c.BlockHashes) + len(c.SourceEndpoint)
}

// scratch is the per-booking working memory, pooled so that a booking
// allocates nothing for its context or its bookkeeping.
type scratch struct {
	hc hints.HintContext
	// arena is lent to the policies for their payloads (kv-fetch's block
	// hashes), which the envelope copies before the scratch is reused.
	arena []byte
	// kvCopy is the booking's copy with the endpoint filled in from the
	// source worker's advertisement, when the booking names none.
	kvCopy hints.CommittedCopy
	// kept points at the actions kept, in the slices the policies
	// returned: read, never written, and encoded once all have run.
	kept [MaxActions]*hints.Action
	// actions is lent to the policies for the actions they return
	// (HintContext.Actions), as arena is for their payloads.
	actions [lentActions]hints.Action
}

// lentActions is how many actions a booking's scratch lends its policies:
// one each for a role of several policies; a policy that asks for more
// than is left gets a slice of its own.
const lentActions = 8

// Ready reports whether a config has loaded.
func (d *Dispatcher) Ready() bool { return d.snap.Load() != nil }

// ConfigHash returns the hash of the config in force, or "" before the first.
func (d *Dispatcher) ConfigHash() string {
	if s := d.snap.Load(); s != nil {
		return s.hash
	}
	return ""
}

// Config returns the policy file in force and the hash the config is known
// by (see Config.Hash); both empty before the first load. A config loaded
// with no policy file (no role) returns a nil doc and its hash: tell it
// from "not loaded" with Ready.
func (d *Dispatcher) Config() (doc []byte, hash string) {
	if s := d.snap.Load(); s != nil {
		return s.doc, s.hash
	}
	return nil, ""
}

// Roles lists the roles of the config in force, sorted; nil before the
// first.
func (d *Dispatcher) Roles() []string {
	if s := d.snap.Load(); s != nil {
		return s.roleNames()
	}
	return nil
}

// OnApply registers f to run, in the loading goroutine, after every config
// that takes effect (the PodReporter writes the applied hash from it). Call
// it before the first Load.
func (d *Dispatcher) OnApply(f func(hash string)) { d.onApply = append(d.onApply, f) }

// Book runs the booked role's hint policies for one booking and hands the
// hint, if any, to the worker's delivery queue. It never waits for delivery.
//
// Errors wrap ErrNotReady, ErrUnknownRole or ErrInvalidBooking. A booking
// that yields no message is not an error: Hint.Outcome says why.
func (d *Dispatcher) Book(ctx context.Context, b *Booking) (Hint, error) {
	h, w, end, err := d.build(ctx, b, nil)
	if err == nil && h.Outcome == OutcomeHinted {
		h.Queued = w.Deliver(h.Message, end)
	}
	return h, err
}

// Build is Book without the delivery: it returns the hint the booking
// yields and sends nothing. It is for routers that post hints themselves,
// and for tests.
func (d *Dispatcher) Build(ctx context.Context, b *Booking) (Hint, error) {
	h, _, _, err := d.build(ctx, b, nil)
	return h, err
}

// BuildInto is Build writing the message into buf's memory instead of a
// new buffer: from buf's start, in place when it fits, else in a buffer of
// its own that h.Message then is. A router that carries each hint on its
// request (CarryHint copies it into the body) and is then done with it can
// pass the same memory to every booking, h.Message[:0] of the last one, and
// a booking then allocates nothing. h.Message belongs to the caller and
// stays valid until the caller reuses that memory; nothing else keeps it.
// buf may be nil, which is Build.
func (d *Dispatcher) BuildInto(ctx context.Context, b *Booking, buf []byte) (Hint, error) {
	h, _, _, err := d.build(ctx, b, buf)
	return h, err
}

// build checks the booking, looks up its role and worker, and runs the
// policies. It writes the message into buf's memory (a new buffer when buf
// is nil or too small) and returns the worker and the time the last policy
// returned, for delivery.
func (d *Dispatcher) build(ctx context.Context, b *Booking, buf []byte) (Hint, Worker, time.Time, error) {
	s := d.snap.Load()
	if s == nil {
		d.refusals.errNotReady.Inc()
		return Hint{}, nil, time.Time{}, ErrNotReady
	}
	if err := validateBooking(b); err != nil {
		d.refusals.errInvalid.Inc()
		return Hint{}, nil, time.Time{}, err
	}
	if err := copyFits(b, d.maxBooking); err != nil {
		d.refusals.errTooLarge.Inc()
		return Hint{}, nil, time.Time{}, err
	}
	rr, ok := s.roles[b.Role]
	if !ok {
		d.refusals.errUnknownRole.Inc()
		return Hint{}, nil, time.Time{}, fmt.Errorf("%w %q: the hints config in force (hash %s) has roles %s",
			ErrUnknownRole, b.Role, s.hash, strings.Join(s.roleNames(), ", "))
	}
	h := Hint{ConfigHash: s.hash}
	w := d.workers.Lookup(b.Worker)
	switch {
	case w == nil:
		rr.metrics.unknownWorker.Inc()
		h.Outcome = OutcomeUnknownWorker
		return h, nil, time.Time{}, nil
	case !w.InPool(b.Role):
		rr.metrics.notInPool.Inc()
		h.Outcome = OutcomeNotInPool
		return h, w, time.Time{}, nil
	case !w.HintCapable():
		rr.metrics.notCapable.Inc()
		h.Outcome = OutcomeNotHintCapable
		return h, w, time.Time{}, nil
	case len(rr.hints) == 0:
		rr.metrics.noActions.Inc()
		h.Outcome = OutcomeNoActions
		return h, w, time.Time{}, nil
	}

	sc := d.scratch.Get().(*scratch)
	kv := b.KVCopy
	if kv != nil && rr.readsCopy && kv.SourceEndpoint == "" && kv.SourceWorker != "" {
		kv, h.CopyDrop = d.resolveSource(kv, &sc.kvCopy)
		if h.CopyDrop != CopyKept {
			rr.metrics.copyDropped[h.CopyDrop].Inc()
		}
	}
	if kv != nil && rr.readsCopy && !d.inDomain(w, kv) {
		kv, h.CopyDrop = nil, CopyDropOutsideDomain
		rr.metrics.copyDropped[h.CopyDrop].Inc()
	}
	if need := arenaFor(kv); cap(sc.arena) < need {
		sc.arena = make([]byte, 0, need)
	}
	sc.hc = hints.HintContext{
		RequestID:    b.RequestID,
		Role:         b.Role,
		Worker:       b.Worker,
		PromptTokens: b.PromptTokens,
		BlockSize:    b.BlockSize,
		Session:      b.Session,
	}
	host := hostbridge.Of[hints.HintContext, hints.CommittedCopy, hints.Action](&sc.hc)
	host.KVCopy = kv
	host.Arena = sc.arena[:0]
	host.Actions = sc.actions[:0]
	// A policy that reads the copy gets time for each of its blocks.
	var copyBudget time.Duration
	if kv != nil {
		copyBudget = d.perBlock * time.Duration(len(kv.BlockHashes))
	}
	n, end := d.runPolicies(ctx, rr, &sc.hc, host, &sc.kept, copyBudget)
	if n > 0 {
		// The message outlives the booking, on its way to the worker and
		// back to the caller: unless the caller lends its memory
		// (BuildInto), it is the one buffer a booking allocates, sized
		// exactly, and written once.
		h.Message = encodeMessage(buf, b.RequestID, sc.kept[:n])
		h.Actions = n
	}
	clear(sc.actions[:len(host.Actions)]) // drop references to the policies' actions
	clear(sc.kept[:n])
	sc.hc = hints.HintContext{}       // and to the caller's booking
	sc.kvCopy = hints.CommittedCopy{} // and its hashes
	if cap(sc.arena) > payloadArenaBytes+21*maxPooledArenaBlocks+MaxSourceEndpointBytes {
		// An arena grown for a very long copy is not kept: the pool would
		// pin it for bookings that rarely need it.
		sc.arena = make([]byte, 0, payloadArenaBytes)
	}
	d.scratch.Put(sc)

	if n == 0 {
		rr.metrics.noActions.Inc()
		h.Outcome = OutcomeNoActions
		return h, w, end, nil
	}
	rr.metrics.hinted.Inc()
	h.Outcome = OutcomeHinted
	return h, w, end, nil
}

// maxPooledArenaBlocks is the largest copy, in blocks, whose arena the
// scratch pool keeps: 32,768 blocks, a 1M-token prompt at block size 32
// (about 700 KB). Longer copies allocate their arena per booking.
const maxPooledArenaBlocks = 32 << 10

// resolveSource fills in the endpoint of a copy that names its source
// worker but no endpoint, from what the source advertises for the copy's
// rank, into dst. It returns the copy to use, nil when it is dropped, and
// why.
func (d *Dispatcher) resolveSource(kv, dst *hints.CommittedCopy) (*hints.CommittedCopy, CopyDrop) {
	src := d.workers.Lookup(kv.SourceWorker)
	if src == nil {
		return nil, CopyDropUnknownSource
	}
	ep, ok := src.SourceEndpoint(kv.SourceRank)
	if !ok || ep == "" {
		return nil, CopyDropUnknownSourceRank
	}
	*dst = *kv
	dst.SourceEndpoint = ep
	return dst, CopyKept
}

// inDomain reports whether the copy may be fetched by the booked worker w:
// always, unless w requires its KV transfers to stay in its transfer
// domain; then only from a registered source worker whose value in that
// domain is w's. A worker that requires a domain it publishes no value in
// takes no copy (Dynamo refuses to place such a worker at all).
func (d *Dispatcher) inDomain(w Worker, kv *hints.CommittedCopy) bool {
	tw, ok := w.(TopologyWorker)
	if !ok {
		return true
	}
	domain, enforcement, _ := tw.KVTransferPolicy()
	if domain == "" || enforcement != KVTransferRequired {
		return true
	}
	value, ok := tw.TopologyDomain(domain)
	if !ok || kv.SourceWorker == "" {
		return false
	}
	src, ok := d.workers.Lookup(kv.SourceWorker).(TopologyWorker)
	if !ok {
		return false
	}
	srcValue, ok := src.TopologyDomain(domain)
	return ok && srcValue == value
}

// runPolicies runs the role's policies in order and records the actions
// they keep in kept. It returns the number kept and the time the last
// policy returned.
//
// A policy that never blocks runs inline and keeps its actions however
// long it took: Go cannot preempt it, so dropping a late result would save
// no time, and on a busy machine the overrun is the scheduler's. Its
// overruns are counted. A policy that may block runs on its own goroutine
// (runIsolated): the booking waits for it at most the hard deadline, and
// its overruns count towards its ejection. Each inline policy's end time
// is the next one's start, so the clock is read once per policy plus
// once. A policy that declares KVCopy has copyBudget on top of both
// deadlines.
func (d *Dispatcher) runPolicies(ctx context.Context, rr *roleRun, hc *hints.HintContext, host *hostbridge.State[hints.CommittedCopy, hints.Action], kept *[MaxActions]*hints.Action, copyBudget time.Duration) (int, time.Time) {
	n := 0
	fetchKept := false // the engine runs only a hint's first kv.fetch
	start := time.Now()
	var prev time.Duration // when the previous policy returned, from start
	for i := range rr.hints {
		hr := &rr.hints[i]
		var actions []hints.Action
		var err error
		var elapsed time.Duration
		if hr.outlier == nil {
			actions, err = runPolicy(ctx, hr.hint, hc, host)
			// time.Since reads the monotonic clock alone; time.Now would
			// read the wall clock too, and clock reads are a visible share
			// of a booking on virtual machines.
			at := time.Since(start)
			elapsed = at - prev
			prev = at
			if elapsed > d.deadline {
				if limit := d.deadlineOf(hr, copyBudget); elapsed > limit {
					hr.metrics.overrun.observe(elapsed)
				}
			}
		} else {
			var res isolatedResult
			actions, elapsed, res, err = d.runIsolated(ctx, hr, hc, host.KVCopy, d.hardDeadlineOf(hr, copyBudget))
			prev = time.Since(start)
			switch res {
			case resultSkipped:
				continue
			case resultAbandoned:
				d.fail(hr, DropDeadline, 0, start.Add(prev), fmt.Errorf("did not return within its hard deadline of %v; the booking answered without it", elapsed))
				continue
			}
			if limit := d.deadlineOf(hr, copyBudget); elapsed > limit {
				hr.metrics.overrun.observe(elapsed)
				d.iso.overran(hr.outlier, elapsed, limit)
			} else {
				d.iso.wasOnTime(hr.outlier)
			}
		}
		if err != nil {
			t1 := start.Add(prev)
			if _, ok := err.(*policyPanic); ok {
				d.fail(hr, DropPanic, 0, t1, err)
				continue
			}
			d.fail(hr, DropError, 0, t1, err)
			continue
		}
		if len(actions) == 0 {
			continue
		}
		hasFetch, bad := checkActions(actions, hr.hint.Commitments.Has(hints.KVCopy), fetchKept, d.maxPayload)
		if bad != nil {
			d.fail(hr, DropMalformed, len(actions), start.Add(prev), bad)
			continue
		}
		fetchKept = fetchKept || hasFetch
		keep := len(actions)
		if room := MaxActions - n; keep > room {
			keep = room
			hr.metrics.dropped[DropOverLimit].Add(float64(len(actions) - keep))
		}
		// Policies may return shared, precomputed slices: read them, never
		// write to them.
		for j := 0; j < keep; j++ {
			kept[n] = &actions[j]
			n++
		}
		if keep > 0 {
			hr.metrics.actions.Add(float64(keep))
		}
	}
	rr.metrics.build.Observe(prev.Seconds())
	return n, start.Add(prev)
}

// runPolicy calls one policy, turning a panic into a *policyPanic error: a
// broken plugin loses its own actions, not the booking or the sidecar.
// The policy sees exactly the commitments its provider declared.
func runPolicy(ctx context.Context, h *hintsconfig.Hint, hc *hints.HintContext, host *hostbridge.State[hints.CommittedCopy, hints.Action]) (actions []hints.Action, err error) {
	host.Granted = uint8(h.Commitments)
	defer func() {
		host.Granted = 0
		if r := recover(); r != nil {
			actions, err = nil, &policyPanic{value: r}
		}
	}()
	return h.Policy.BuildHints(ctx, hc)
}

// policyPanic is a panic recovered from a policy.
type policyPanic struct{ value any }

func (p *policyPanic) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// deadlineOf is a policy's deadline on a booking whose copy (if the policy
// reads it) earns copyBudget.
func (d *Dispatcher) deadlineOf(hr *hintRun, copyBudget time.Duration) time.Duration {
	if hr.hint.Commitments.Has(hints.KVCopy) {
		return d.deadline + copyBudget
	}
	return d.deadline
}

// hardDeadlineOf is the most a booking waits for a policy that may block.
func (d *Dispatcher) hardDeadlineOf(hr *hintRun, copyBudget time.Duration) time.Duration {
	if hr.hint.Commitments.Has(hints.KVCopy) {
		return d.iso.opts.HardDeadline + copyBudget
	}
	return d.iso.opts.HardDeadline
}

// checkActions holds one policy's actions to hints.CheckActionWithin and to
// the rules on kv.fetch: only the role's KV copy sender (the one policy
// that declares hints.KVCopy, sendsCopy) may emit one, since any other
// policy's fetch would displace the committed copy; and a hint carries at
// most one, since an engine runs only the first and a later one would be
// sent and silently ignored. It reports whether the actions carry a
// kv.fetch.
func checkActions(actions []hints.Action, sendsCopy, fetchKept bool, maxPayload int) (hasFetch bool, err error) {
	for i := range actions {
		a := &actions[i]
		if err := hints.CheckActionWithin(a, maxPayload); err != nil {
			return false, fmt.Errorf("action %d of %d: %w", i+1, len(actions), err)
		}
		if a.Type == hints.ActionKVFetch {
			if !sendsCopy {
				return false, fmt.Errorf("action %d of %d: a kv.fetch from a policy that does not declare hints.KVCopy; only the role's KV copy sender may send one", i+1, len(actions))
			}
			if fetchKept || hasFetch {
				return false, fmt.Errorf("action %d of %d: a second kv.fetch in one hint; engines run only the first", i+1, len(actions))
			}
			hasFetch = true
		}
	}
	return hasFetch, nil
}

// fail counts a policy run whose actions are dropped and logs it, at most
// once per failureLogInterval per policy.
func (d *Dispatcher) fail(hr *hintRun, reason DropReason, lost int, now time.Time, err error) {
	hr.metrics.failures[reason].Inc()
	if lost > 0 && hr.metrics.dropped[reason] != nil {
		hr.metrics.dropped[reason].Add(float64(lost))
	}
	last := hr.lastLog.Load()
	ns := now.UnixNano()
	if ns-last < int64(failureLogInterval) || !hr.lastLog.CompareAndSwap(last, ns) {
		return
	}
	d.log.Error(err, "Hint policy failed; its actions were dropped", "policy", hr.id, "type", hr.hint.Type,
		"reason", reason.String(), "note", "logged at most every "+failureLogInterval.String()+"; see kvhint_router_policy_failures_total")
}
