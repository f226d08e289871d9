package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

// Isolation of policies that may block.
//
// A policy whose provider declares hints.HintProvider.NeverBlocks (the
// built-ins do) runs inline on the booking's goroutine, and its actions are
// always kept: it only computes, so an overrun is the machine's, and
// dropping the result would save no time. Every other policy runs on a
// goroutine of its own, and the booking waits for it at most its hard
// deadline. A run that returns after its deadline but before the hard
// deadline keeps its actions (the time is spent) and counts as an overrun;
// a run the booking stops waiting for is abandoned (its actions, should it
// ever return, are dropped) and ejects the policy at once.
//
// Outlier ejection, as Envoy does for hosts: a policy that overruns
// EjectAfter times in a row, or has a run abandoned, is taken out of its
// role's path for a backoff (EjectionBase, times EjectionMultiplier for
// each ejection in a row, at most EjectionMax). It then runs again on
// probation: one overrun ejects it again for the next, longer backoff;
// ProbationRuns runs in a row on time make it healthy, and its backoff
// starts from EjectionBase again. MaxRuns bounds the goroutines of one
// policy, abandoned ones included: past it, bookings skip the policy.

// Defaults of IsolationOptions.
const (
	// DefaultPolicyHardDeadline is the most a booking waits for a policy
	// that may block (on top of the budget per block of a policy that
	// reads the committed copy).
	DefaultPolicyHardDeadline = 10 * time.Millisecond
	// DefaultEjectAfter is the number of overruns in a row that ejects a
	// policy.
	DefaultEjectAfter = 5
	// DefaultEjectionBase is the first ejection's backoff.
	DefaultEjectionBase = 10 * time.Second
	// DefaultEjectionMultiplier grows the backoff for each ejection in a row.
	DefaultEjectionMultiplier = 2.0
	// DefaultEjectionMax caps the backoff.
	DefaultEjectionMax = 5 * time.Minute
	// DefaultProbationRuns is the number of runs in a row on time that
	// ends a probation.
	DefaultProbationRuns = 100
	// DefaultMaxPolicyRuns bounds the runs of one policy in flight at
	// once, those abandoned and still running included.
	DefaultMaxPolicyRuns = 64
)

// IsolationOptions configure how a dispatcher runs the policies that may
// block, and when it ejects one; zero fields take the defaults above.
type IsolationOptions struct {
	// HardDeadline is the most a booking waits for one such policy.
	HardDeadline time.Duration
	// EjectAfter is the number of overruns in a row that ejects a policy.
	EjectAfter int
	// EjectionBase is the backoff of a first ejection.
	EjectionBase time.Duration
	// EjectionMultiplier multiplies the backoff for each further ejection
	// in a row; at least 1.
	EjectionMultiplier float64
	// EjectionMax caps the backoff.
	EjectionMax time.Duration
	// ProbationRuns is the number of runs in a row on time, after a
	// re-admission, that make a policy healthy again.
	ProbationRuns int
	// MaxRuns bounds the runs of one policy in flight at once, abandoned
	// runs that never returned included.
	MaxRuns int
}

// Check reports the first value out of range, named by the sidecar flag
// that sets it; zero values are left to the defaults.
func (o IsolationOptions) Check() error {
	switch {
	case o.HardDeadline < 0:
		return fmt.Errorf("--policy-hard-deadline is %v; it must be positive", o.HardDeadline)
	case o.EjectAfter < 0:
		return fmt.Errorf("--policy-eject-after is %d; it must be at least 1", o.EjectAfter)
	case o.EjectionBase < 0:
		return fmt.Errorf("--policy-ejection-base is %v; it must be positive", o.EjectionBase)
	case o.EjectionMultiplier != 0 && o.EjectionMultiplier < 1:
		return fmt.Errorf("--policy-ejection-multiplier is %v; it must be at least 1 (the ejection time never shrinks while a policy keeps overrunning)", o.EjectionMultiplier)
	case o.EjectionMax < 0 || (o.EjectionMax > 0 && o.EjectionMax < o.EjectionBase):
		return fmt.Errorf("--policy-ejection-max is %v; it must be at least --policy-ejection-base (%v)", o.EjectionMax, o.EjectionBase)
	case o.ProbationRuns < 0:
		return fmt.Errorf("--policy-probation-runs is %d; it must be at least 1", o.ProbationRuns)
	case o.MaxRuns < 0:
		return fmt.Errorf("--policy-max-runs is %d; it must be at least 1", o.MaxRuns)
	}
	return nil
}

func (o IsolationOptions) withDefaults() IsolationOptions {
	if o.HardDeadline <= 0 {
		o.HardDeadline = DefaultPolicyHardDeadline
	}
	if o.EjectAfter <= 0 {
		o.EjectAfter = DefaultEjectAfter
	}
	if o.EjectionBase <= 0 {
		o.EjectionBase = DefaultEjectionBase
	}
	if o.EjectionMultiplier < 1 {
		o.EjectionMultiplier = DefaultEjectionMultiplier
	}
	if o.EjectionMax <= 0 {
		o.EjectionMax = DefaultEjectionMax
	}
	o.EjectionMax = max(o.EjectionMax, o.EjectionBase)
	if o.ProbationRuns <= 0 {
		o.ProbationRuns = DefaultProbationRuns
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = DefaultMaxPolicyRuns
	}
	return o
}

// backoff is the ejection time of the n-th ejection in a row (from 1).
func (o IsolationOptions) backoff(n int) time.Duration {
	b := float64(o.EjectionBase)
	for i := 1; i < n && b < float64(o.EjectionMax); i++ {
		b *= o.EjectionMultiplier
	}
	return min(time.Duration(b), o.EjectionMax)
}

// EjectReason says why a policy was ejected.
type EjectReason int

const (
	// EjectOverrun: the policy returned after its deadline EjectAfter times
	// in a row (once, on probation).
	EjectOverrun EjectReason = iota + 1
	// EjectAbandoned: a booking stopped waiting for a run at the hard
	// deadline.
	EjectAbandoned
	// EjectBusy: the policy had MaxRuns runs in flight.
	EjectBusy
	numEjectReasons
)

var ejectReasonNames = [numEjectReasons]string{"", "overrun", "abandoned", "busy"}

// String is the reason as metrics, logs and the pod report spell it.
func (r EjectReason) String() string {
	if r <= 0 || int(r) >= len(ejectReasonNames) {
		return "unknown"
	}
	return ejectReasonNames[r]
}

// PolicyState is where a policy that may block stands.
type PolicyState int32

const (
	// PolicyActive: the policy runs on every booking of its role.
	PolicyActive PolicyState = iota
	// PolicyEjected: bookings skip the policy until its backoff ends.
	PolicyEjected
	// PolicyProbation: the policy runs again; one overrun ejects it.
	PolicyProbation
)

// String names the state.
func (s PolicyState) String() string {
	switch s {
	case PolicyActive:
		return "active"
	case PolicyEjected:
		return "ejected"
	case PolicyProbation:
		return "probation"
	}
	return "unknown"
}

// Ejection is one policy out of its role's path, as Dispatcher.Ejections
// reports it.
type Ejection struct {
	// Role and Policy (its name, else its type) say which policy.
	Role, Policy string
	// Type is the policy's type.
	Type string
	// Reason is what ejected it.
	Reason EjectReason
	// Since is when; Until is when it runs again, on probation.
	Since, Until time.Time
	// InARow counts the ejections in a row, this one included: the
	// backoff grew with it.
	InARow int
}

// outlier is the ejection state of one policy that may block. It lives on
// the dispatcher, keyed by role and policy, so that a reload keeps it (and
// the count of the runs still in flight) for a policy that stays.
type outlier struct {
	key, role, policy, typ string

	state    atomic.Int32 // a PolicyState
	overruns atomic.Int32 // in a row, while active
	onTime   atomic.Int32 // in a row, while on probation
	inFlight atomic.Int32 // runs not yet returned, abandoned ones included

	mu     sync.Mutex // transitions
	inARow int
	reason EjectReason
	since  time.Time
	until  time.Time
	timer  *time.Timer
	gone   bool // the policy left the config: no more transitions

	m *isolationSeries
}

// isolator holds the dispatcher's outliers and what it does on a
// transition.
type isolator struct {
	opts     IsolationOptions
	metrics  Metrics
	mu       sync.Mutex
	outliers map[string]*outlier
	onChange []func()
	d        *Dispatcher
}

func outlierKey(role, policy, typ string) string { return role + "\x00" + policy + "\x00" + typ }

// forHint returns the outlier of a policy, kept from an earlier config when
// it ran there; nil for a policy that never blocks.
func (iso *isolator) forHint(role string, h *hintsconfig.Hint, keep map[string]bool) *outlier {
	if h.NeverBlocks {
		return nil
	}
	key := outlierKey(role, h.ID(), h.Type)
	keep[key] = true
	iso.mu.Lock()
	defer iso.mu.Unlock()
	if o, ok := iso.outliers[key]; ok {
		return o
	}
	o := &outlier{key: key, role: role, policy: h.ID(), typ: h.Type, m: isolationOf(iso.metrics, role, h.ID(), h.Type)}
	iso.outliers[key] = o
	return o
}

// retire forgets the outliers of policies that are not in keep, the
// policies of the config just loaded (forgetRemoved reports them to the
// metrics).
func (iso *isolator) retire(keep map[string]bool) {
	iso.mu.Lock()
	var changed bool
	for key, o := range iso.outliers {
		if keep[key] {
			continue
		}
		delete(iso.outliers, key)
		o.mu.Lock()
		o.gone = true
		if o.timer != nil {
			o.timer.Stop()
		}
		changed = changed || PolicyState(o.state.Load()) == PolicyEjected
		o.mu.Unlock()
	}
	iso.mu.Unlock()
	if changed {
		iso.changed()
	}
}

func (iso *isolator) changed() {
	for _, f := range iso.onChange {
		f()
	}
}

// ejections lists the policies ejected now, sorted by role and policy.
func (iso *isolator) ejections() []Ejection {
	iso.mu.Lock()
	defer iso.mu.Unlock()
	var out []Ejection
	for _, o := range iso.outliers {
		o.mu.Lock()
		if PolicyState(o.state.Load()) == PolicyEjected {
			out = append(out, Ejection{Role: o.role, Policy: o.policy, Type: o.typ, Reason: o.reason, Since: o.since, Until: o.until, InARow: o.inARow})
		}
		o.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Ejection) int {
		if c := strings.Compare(a.Role, b.Role); c != 0 {
			return c
		}
		return strings.Compare(a.Policy, b.Policy)
	})
	return out
}

// eject takes the policy out of its role's path, unless it already is.
func (iso *isolator) eject(o *outlier, reason EjectReason, detail string) {
	o.mu.Lock()
	if o.gone || PolicyState(o.state.Load()) == PolicyEjected {
		o.mu.Unlock()
		return
	}
	o.inARow++
	backoff := iso.opts.backoff(o.inARow)
	now := time.Now()
	o.reason, o.since, o.until = reason, now, now.Add(backoff)
	o.state.Store(int32(PolicyEjected))
	o.overruns.Store(0)
	o.onTime.Store(0)
	o.timer = time.AfterFunc(backoff, func() { iso.readmit(o) })
	inARow := o.inARow
	o.mu.Unlock()

	o.m.ejections[reason].Inc()
	o.m.ejected.Set(1)
	o.m.probation.Set(0)
	iso.d.log.Info("Hint policy ejected from its role's path", "role", o.role, "policy", o.policy, "type", o.typ,
		"reason", reason.String(), "detail", detail, "for", backoff.String(), "ejectionsInARow", inARow)
	iso.changed()
}

// readmit puts an ejected policy back on probation when its backoff ends.
func (iso *isolator) readmit(o *outlier) {
	o.mu.Lock()
	if o.gone || PolicyState(o.state.Load()) != PolicyEjected {
		o.mu.Unlock()
		return
	}
	o.state.Store(int32(PolicyProbation))
	o.mu.Unlock()
	o.m.ejected.Set(0)
	o.m.probation.Set(1)
	iso.d.log.Info("Hint policy re-admitted on probation", "role", o.role, "policy", o.policy, "type", o.typ,
		"probationRuns", iso.opts.ProbationRuns)
	iso.changed()
}

// pass ends a probation: the policy ran ProbationRuns times in a row on time.
func (iso *isolator) pass(o *outlier) {
	o.mu.Lock()
	if o.gone || PolicyState(o.state.Load()) != PolicyProbation {
		o.mu.Unlock()
		return
	}
	o.state.Store(int32(PolicyActive))
	o.inARow = 0
	o.overruns.Store(0)
	o.mu.Unlock()
	o.m.probation.Set(0)
	iso.d.log.Info("Hint policy passed its probation", "role", o.role, "policy", o.policy, "type", o.typ)
}

// overran records a run that returned after its deadline.
func (iso *isolator) overran(o *outlier, elapsed, deadline time.Duration) {
	switch PolicyState(o.state.Load()) {
	case PolicyProbation:
		iso.eject(o, EjectOverrun, fmt.Sprintf("on probation, a run took %v, over its %v deadline", elapsed, deadline))
	case PolicyActive:
		if n := o.overruns.Add(1); int(n) >= iso.opts.EjectAfter {
			iso.eject(o, EjectOverrun, fmt.Sprintf("%d runs in a row over the deadline, the last %v over %v", n, elapsed, deadline))
		}
	}
}

// wasOnTime records a run that returned within its deadline.
func (iso *isolator) wasOnTime(o *outlier) {
	switch PolicyState(o.state.Load()) {
	case PolicyActive:
		if o.overruns.Load() != 0 {
			o.overruns.Store(0)
		}
	case PolicyProbation:
		if int(o.onTime.Add(1)) >= iso.opts.ProbationRuns {
			iso.pass(o)
		}
	}
}

// isolatedRun is one run of a policy that may block, on its own goroutine,
// with its own copy of everything the booking lends a policy: the booking
// may return, and its memory be reused, while the run goes on.
type isolatedRun struct {
	hc      hints.HintContext
	kv      hints.CommittedCopy
	actions []hints.Action
	err     error
	elapsed time.Duration
	// status is runRunning until either the run returns (runDone) or the
	// booking stops waiting (runAbandoned), whichever comes first.
	status atomic.Int32
	done   chan struct{}
}

const (
	runRunning int32 = iota
	runDone
	runAbandoned
)

// isolatedResult is what a booking learns of an isolated run.
type isolatedResult int

const (
	resultReturned  isolatedResult = iota // actions and err are the run's
	resultSkipped                         // the policy is ejected or busy: not run
	resultAbandoned                       // the hard deadline passed first
)

// runIsolated runs one policy that may block, waiting at most hard for it.
func (d *Dispatcher) runIsolated(ctx context.Context, hr *hintRun, hc *hints.HintContext, kv *hints.CommittedCopy, hard time.Duration) ([]hints.Action, time.Duration, isolatedResult, error) {
	o := hr.outlier
	if PolicyState(o.state.Load()) == PolicyEjected {
		o.m.skippedEjected.Inc()
		return nil, 0, resultSkipped, nil
	}
	if int(o.inFlight.Add(1)) > d.iso.opts.MaxRuns {
		o.inFlight.Add(-1)
		o.m.skippedBusy.Inc()
		d.iso.eject(o, EjectBusy, fmt.Sprintf("%d runs in flight, the most allowed", d.iso.opts.MaxRuns))
		return nil, 0, resultSkipped, nil
	}
	r := &isolatedRun{done: make(chan struct{})}
	r.hc = hints.HintContext{
		RequestID:    strings.Clone(hc.RequestID),
		Role:         strings.Clone(hc.Role),
		Worker:       strings.Clone(hc.Worker),
		PromptTokens: hc.PromptTokens,
		BlockSize:    hc.BlockSize,
		Session:      hints.Session{ID: strings.Clone(hc.Session.ID), Turn: hc.Session.Turn, Final: hc.Session.Final},
	}
	host := hostbridge.Of[hints.HintContext, hints.CommittedCopy, hints.Action](&r.hc)
	if kv != nil && hr.hint.Commitments.Has(hints.KVCopy) {
		r.kv = hints.CommittedCopy{SourceWorker: strings.Clone(kv.SourceWorker), SourceEndpoint: strings.Clone(kv.SourceEndpoint),
			SourceRank: kv.SourceRank, BlockHashes: slices.Clone(kv.BlockHashes)}
		host.KVCopy = &r.kv
		host.Arena = make([]byte, 0, arenaFor(&r.kv))
	}
	// A policy that does not read the copy gets no arena: its payloads
	// take buffers of their own, sized to them.
	// The run gets a context of its own: the booking's may be reused once
	// the booking returns. It is cancelled when the booking stops waiting.
	runCtx, cancel := context.WithCancel(context.Background())
	if ctx.Err() != nil {
		cancel()
	}
	start := time.Now()
	go func() {
		defer cancel()
		actions, err := runPolicy(runCtx, hr.hint, &r.hc, host)
		elapsed := time.Since(start)
		o.inFlight.Add(-1)
		if r.status.CompareAndSwap(runRunning, runDone) {
			r.actions, r.err, r.elapsed = actions, err, elapsed
			close(r.done)
			return
		}
		// Abandoned: the booking answered without it.
		o.m.stuck.Dec()
		o.m.abandonedReturn.Observe(elapsed.Seconds())
	}()
	t := time.NewTimer(hard)
	defer t.Stop()
	select {
	case <-r.done:
		return r.actions, r.elapsed, resultReturned, r.err
	case <-t.C:
	}
	o.m.stuck.Inc() // before the swap, which the run's return reads
	if !r.status.CompareAndSwap(runRunning, runAbandoned) {
		o.m.stuck.Dec()
		<-r.done // it returned just now
		return r.actions, r.elapsed, resultReturned, r.err
	}
	cancel()
	d.iso.eject(o, EjectAbandoned, fmt.Sprintf("a run had not returned after the hard deadline of %v", hard))
	return nil, hard, resultAbandoned, nil
}

// Ejections lists the policies out of their role's path now, sorted by
// role and policy: the sidecar reports them on its pod.
func (d *Dispatcher) Ejections() []Ejection { return d.iso.ejections() }

// OnEjectionChange registers f to run after a policy is ejected or
// re-admitted, or an ejected policy leaves the config; f must not block
// (it runs on a booking's goroutine or a timer's). Call it before the
// first Load.
func (d *Dispatcher) OnEjectionChange(f func()) { d.iso.onChange = append(d.iso.onChange, f) }
