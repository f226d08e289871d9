package dispatch

import (
	"slices"
	"time"
)

// Booking outcomes, as Outcome.String spells them.
const (
	outcomeHinted        = "hinted"           // a hint was built and handed to delivery
	outcomeNoActions     = "no_actions"       // the policies kept no action: no message
	outcomeNotCapable    = "not_hint_capable" // the worker does not advertise router_hint
	outcomeUnknownWorker = "unknown_worker"   // the worker is not in the registry
	outcomeNotInPool     = "not_in_pool"      // the worker is outside the role's worker pool
)

// Refusal says why Book or Build refused a booking (returned an error).
type Refusal int

const (
	// RefusalUnknownRole: the role is not in the config in force
	// (ErrUnknownRole).
	RefusalUnknownRole Refusal = iota
	// RefusalInvalid: a field is missing or out of range, or the request
	// body did not decode (ErrInvalidBooking, RecordInvalidBooking).
	RefusalInvalid
	// RefusalNotReady: no config has loaded yet (ErrNotReady).
	RefusalNotReady
	// RefusalTooLarge: the committed copy, or the request body, is over
	// the booking limit (ErrBookingTooLarge, RecordTooLargeBooking).
	RefusalTooLarge
	numRefusals
)

var refusalNames = [numRefusals]string{"unknown_role", "invalid", "not_ready", "too_large"}

// String is the reason as metrics spell it.
func (r Refusal) String() string {
	if r < 0 || r >= numRefusals {
		return "unknown"
	}
	return refusalNames[r]
}

// DropReason says why a policy's actions were not sent.
type DropReason int

const (
	// DropError: the policy returned an error.
	DropError DropReason = iota
	// DropPanic: the policy panicked.
	DropPanic
	// DropDeadline: the policy, one that may block, had not returned by
	// its hard deadline; the booking answered without it.
	DropDeadline
	// DropMalformed: the policy emitted an action with a bad type, version
	// or payload, or a payload that breaks its action type's consumer rules.
	DropMalformed
	// DropOverLimit: the booking already carried MaxActions actions. This
	// is not a failure of the policy, only a drop.
	DropOverLimit
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{"error", "panic", "deadline", "malformed", "over_limit"}

// String is the reason as metrics spell it.
func (r DropReason) String() string {
	if r < 0 || r >= numDropReasons {
		return "unknown"
	}
	return dropReasonNames[r]
}

// Counter counts events. prometheus.Counter satisfies it.
type Counter interface {
	Inc()
	Add(float64)
}

// Gauge holds a value that goes up and down. prometheus.Gauge satisfies it.
type Gauge interface {
	Set(float64)
	Inc()
	Dec()
}

// Observer records one observation of a distribution, such as a duration
// in seconds. prometheus.Observer satisfies it.
type Observer interface {
	Observe(float64)
}

// Metrics is the hook through which a Dispatcher reports what it does:
// bookings, policy runs, isolation and config loads. The host fills it
// (the kvhint sidecar exports it to Prometheus); nil in Options.Metrics
// reports nothing and costs nothing.
//
// The dispatcher asks for the Counter, Gauge and Observer of every series
// the booking path touches when it loads a config (and for the refusals,
// once, in NewDispatcher), and keeps them for the bookings on that config:
// the methods of Metrics may take their time (label lookups, locks), while
// the series they return are called on every booking, from many goroutines
// at once, and must be cheap and safe for concurrent use. The dispatcher
// calls the methods of Metrics one at a time: NewDispatcher, then loads,
// which it serialises. A nil series, or a nil RoleMetrics, PolicyMetrics
// or IsolationMetrics, counts nothing.
type Metrics interface {
	// Refusals counts the bookings refused for reason.
	Refusals(reason Refusal) Counter
	// Role returns the series of one role of the config being loaded.
	Role(role string) RoleMetrics
	// Policy returns the series of one policy instance of a role: policy
	// is its name, or its type when it has none.
	Policy(role, policy, policyType string) PolicyMetrics
	// Isolation returns the isolation series of a policy that may block
	// (see IsolationOptions), once while the policy stays in the config.
	Isolation(role, policy, policyType string) IsolationMetrics
	// ConfigLoaded reports a load that succeeded at at: hash is the config
	// in force now and previous the one before it, "" when there was none
	// and hash itself when the source came back to the config in force
	// after a failure.
	ConfigLoaded(hash, previous string, at time.Time)
	// ConfigFailed reports a load that failed at at, once per distinct
	// refused document or source error; the config in force stays.
	ConfigFailed(at time.Time)
	// ForgetRole reports a role that left the config: its series, the
	// series of its policies included, may go.
	ForgetRole(role string)
	// ForgetPolicy reports a policy instance that left its role, which
	// stays: its series, isolation included, may go.
	ForgetPolicy(role, policy, policyType string)
}

// RoleMetrics are the series of one role.
type RoleMetrics interface {
	// Bookings counts the role's accepted bookings of one outcome (every
	// Outcome but OutcomeNone).
	Bookings(outcome Outcome) Counter
	// BuildSeconds observes the time the role's policies took on one
	// booking, in seconds.
	BuildSeconds() Observer
	// CopiesDropped counts the committed copies dropped before the
	// policies ran, by reason (every CopyDrop but CopyKept).
	CopiesDropped(reason CopyDrop) Counter
}

// PolicyMetrics are the series of one policy instance of a role.
type PolicyMetrics interface {
	// Actions counts the policy's actions kept in hints.
	Actions() Counter
	// Failures counts the policy's runs whose actions were all dropped,
	// by reason (DropError, DropPanic, DropDeadline, DropMalformed).
	Failures(reason DropReason) Counter
	// Dropped counts the policy's actions dropped, by reason
	// (DropMalformed, DropOverLimit): runs that erred, panicked or were
	// abandoned return none to count.
	Dropped(reason DropReason) Counter
	// Overruns counts the runs that returned after their deadline and
	// were kept; OverrunSeconds adds up the time they took.
	Overruns() Counter
	OverrunSeconds() Counter
}

// IsolationMetrics are the isolation series of one policy that may block.
type IsolationMetrics interface {
	// Ejections counts the policy's ejections, by reason.
	Ejections(reason EjectReason) Counter
	// Ejected is 1 while the policy is ejected, Probation 1 while it is
	// on probation.
	Ejected() Gauge
	Probation() Gauge
	// SkippedEjected and SkippedBusy count the bookings that did not run
	// the policy: it was ejected, or it had its most runs in flight.
	SkippedEjected() Counter
	SkippedBusy() Counter
	// AbandonedRuns holds the runs abandoned at the hard deadline that
	// have not returned yet; AbandonedRunSeconds observes how long each
	// took when it returns.
	AbandonedRuns() Gauge
	AbandonedRunSeconds() Observer
}

// nop is the series of no metrics: it counts nothing.
type nop struct{}

func (nop) Inc()            {}
func (nop) Dec()            {}
func (nop) Add(float64)     {}
func (nop) Set(float64)     {}
func (nop) Observe(float64) {}

func (nop) Refusals(Refusal) Counter                          { return nop{} }
func (nop) Role(string) RoleMetrics                           { return nop{} }
func (nop) Policy(string, string, string) PolicyMetrics       { return nop{} }
func (nop) Isolation(string, string, string) IsolationMetrics { return nop{} }
func (nop) ConfigLoaded(string, string, time.Time)            {}
func (nop) ConfigFailed(time.Time)                            {}
func (nop) ForgetRole(string)                                 {}
func (nop) ForgetPolicy(string, string, string)               {}
func (nop) Bookings(Outcome) Counter                          { return nop{} }
func (nop) BuildSeconds() Observer                            { return nop{} }
func (nop) CopiesDropped(CopyDrop) Counter                    { return nop{} }
func (nop) Actions() Counter                                  { return nop{} }
func (nop) Failures(DropReason) Counter                       { return nop{} }
func (nop) Dropped(DropReason) Counter                        { return nop{} }
func (nop) Overruns() Counter                                 { return nop{} }
func (nop) OverrunSeconds() Counter                           { return nop{} }
func (nop) Ejections(EjectReason) Counter                     { return nop{} }
func (nop) Ejected() Gauge                                    { return nop{} }
func (nop) Probation() Gauge                                  { return nop{} }
func (nop) SkippedEjected() Counter                           { return nop{} }
func (nop) SkippedBusy() Counter                              { return nop{} }
func (nop) AbandonedRuns() Gauge                              { return nop{} }
func (nop) AbandonedRunSeconds() Observer                     { return nop{} }

// counter, gauge and observer turn a nil series into nop, so that the
// booking path calls its series without a check.
func counter(c Counter) Counter {
	if c == nil {
		return nop{}
	}
	return c
}

func gauge(g Gauge) Gauge {
	if g == nil {
		return nop{}
	}
	return g
}

func observer(o Observer) Observer {
	if o == nil {
		return nop{}
	}
	return o
}

// refusalSeries are the refusal counters, resolved in NewDispatcher.
type refusalSeries struct {
	errUnknownRole, errInvalid, errNotReady, errTooLarge Counter
}

func refusalsOf(m Metrics) refusalSeries {
	return refusalSeries{
		errUnknownRole: counter(m.Refusals(RefusalUnknownRole)),
		errInvalid:     counter(m.Refusals(RefusalInvalid)),
		errNotReady:    counter(m.Refusals(RefusalNotReady)),
		errTooLarge:    counter(m.Refusals(RefusalTooLarge)),
	}
}

// roleMetrics are one role's series, resolved when its config loads.
type roleMetrics struct {
	hinted, noActions, notCapable, unknownWorker, notInPool Counter
	build                                                   Observer
	copyDropped                                             [numCopyDrops]Counter
}

func roleMetricsOf(m Metrics, role string) roleMetrics {
	r := m.Role(role)
	if r == nil {
		r = nop{}
	}
	rm := roleMetrics{
		hinted:        counter(r.Bookings(OutcomeHinted)),
		noActions:     counter(r.Bookings(OutcomeNoActions)),
		notCapable:    counter(r.Bookings(OutcomeNotHintCapable)),
		unknownWorker: counter(r.Bookings(OutcomeUnknownWorker)),
		notInPool:     counter(r.Bookings(OutcomeNotInPool)),
		build:         observer(r.BuildSeconds()),
	}
	for c := CopyKept + 1; c < numCopyDrops; c++ {
		rm.copyDropped[c] = counter(r.CopiesDropped(c))
	}
	return rm
}

// hintMetrics are one policy instance's series, resolved when its config
// loads. A reason its policy cannot fail or drop for has no series (nil).
type hintMetrics struct {
	actions  Counter
	failures [numDropReasons]Counter
	dropped  [numDropReasons]Counter
	overrun  overrunSeries
}

func hintMetricsOf(m Metrics, role, policy, policyType string) hintMetrics {
	p := m.Policy(role, policy, policyType)
	if p == nil {
		p = nop{}
	}
	hm := hintMetrics{actions: counter(p.Actions()), overrun: overrunSeries{runs: counter(p.Overruns()), seconds: counter(p.OverrunSeconds())}}
	for r := DropReason(0); r < numDropReasons; r++ {
		// A run that errs or panics returns no actions to count, nor does one
		// abandoned at its hard deadline; an action
		// dropped past the limit is no failure of its policy.
		if r != DropOverLimit {
			hm.failures[r] = counter(p.Failures(r))
		}
		if r != DropError && r != DropPanic && r != DropDeadline {
			hm.dropped[r] = counter(p.Dropped(r))
		}
	}
	return hm
}

// overrunSeries count one policy's runs past its deadline, kept.
type overrunSeries struct{ runs, seconds Counter }

func (s overrunSeries) observe(d time.Duration) {
	s.runs.Inc()
	s.seconds.Add(d.Seconds())
}

// forgetRemoved reports the roles and policy instances prev had and next
// has not, so that the host's series are those of the config in force and
// not of every config ever loaded: renaming policies on each reload must
// not grow the series without end. A booking still running on prev counts
// into series the host may no longer export.
func forgetRemoved(m Metrics, prev, next *snapshot) {
	for name, rr := range prev.roles {
		nr, kept := next.roles[name]
		if !kept {
			m.ForgetRole(name)
			continue
		}
		for _, h := range rr.hints {
			if !slices.ContainsFunc(nr.hints, func(n hintRun) bool { return n.id == h.id && n.hint.Type == h.hint.Type }) {
				m.ForgetPolicy(name, h.id, h.hint.Type)
			}
		}
	}
}
