package hintstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

// Suite says what to run a provider's policies on. Its zero value runs the
// default bookings with no parameters, in the built-in catalog.
type Suite struct {
	// Params are parameter objects, as JSON, that the provider must
	// accept; every check runs on a policy parsed from each. Empty: `{}`.
	Params []string
	// BadParams maps parameter objects that the provider must refuse to
	// the key each refusal must name; "" for an error of the whole object.
	// They add to the refusals Run derives itself: an unknown key, and for
	// every parameter it can see, a value of the wrong type, and for a
	// number the values the hints YAML's .nan, .inf and -.inf reach Parse as.
	BadParams map[string]string
	// Bookings are run through every policy. Empty: DefaultBookings.
	Bookings []Booking
	// Concurrency is how many goroutines run the bookings at once in the
	// concurrency check; 0 means 8. Run the test with -race.
	Concurrency int
	// Catalog is the catalog of the build the provider is linked into, as
	// it stands before the provider is registered; nil means
	// builtin.NewCatalog(). Run registers the provider in a copy of it, so
	// that what the build would refuse (a second default KVCopy sender
	// under one selection, say) fails the test. A build that changes the
	// defaults with hints.Catalog.SetDefaultHosts passes its catalog here.
	Catalog *hints.Catalog
	// Unbounded names number parameters that take any finite value on
	// purpose. Run refuses a number parameter that accepts both the
	// largest and the smallest float64 unless it is named here.
	Unbounded []string
	// NeverFires says that a policy producing no action on any booking is
	// intended. Without it, such a suite fails: a policy that never fires
	// was not tested, whatever else passed.
	NeverFires bool
}

// Limits the kit holds policies to, the dispatcher's (pkg/dispatch): its
// default booking limit of 1 MiB of block hashes in decimal, and the most
// actions one hint carries.
const (
	bookingLimitBytes = 1 << 20
	maxActions        = 32
	// limitBlocks is the longest copy a dispatcher with the default limit
	// accepts whatever the hashes: 21 bytes each, and room for the endpoint.
	limitBlocks = (bookingLimitBytes - 4<<10) / 21
	// policyDeadline is the dispatcher's default deadline for a policy.
	policyDeadline = time.Millisecond
	// timedBlocks is the longest copy on which runs are timed.
	timedBlocks = 64
)

// DefaultBookings are the bookings Run uses when a Suite names none, a
// spread meant to reach every branch a policy's parameters allow: prompts
// from 1 token to the dispatcher's booking limit (block sizes 16 and 64),
// requests outside any session and a session's first, middle and final
// turns, committed copies from 1 block to the limit (a copy of the whole
// of a 784k-token prompt, at block size 16), and a committed copy whose
// source advertised no control endpoint, which a policy must not turn into
// a kv.fetch (the engines refuse a fetch without a source).
func DefaultBookings() []Booking {
	rng := rand.New(rand.NewPCG(7, 11))
	hashes := func(n int) []uint64 {
		h := make([]uint64, n)
		for i := range h {
			h[i] = rng.Uint64()
		}
		return h
	}
	kvCopy := func(n int) *hints.CommittedCopy {
		return &hints.CommittedCopy{SourceWorker: "worker-src", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: hashes(n)}
	}
	first := func(id string) hints.Session { return hints.Session{ID: id, Turn: 1} }
	middle := func(id string) hints.Session { return hints.Session{ID: id, Turn: 3} }
	final := func(id string) hints.Session { return hints.Session{ID: id, Turn: 6, Final: true} }
	return []Booking{
		{RequestID: "plain", Role: "decode", Worker: "worker-0", PromptTokens: 512, BlockSize: 16},
		{RequestID: "tiny-prompt", Role: "decode", Worker: "worker-0", PromptTokens: 1, BlockSize: 16},
		{RequestID: "session-first", Role: "decode", Worker: "worker-0", PromptTokens: 4096, BlockSize: 16, Session: first("s-1")},
		{RequestID: "session-middle", Role: "decode", Worker: "worker-0", PromptTokens: 32768, BlockSize: 16, Session: middle("s-1")},
		{RequestID: "session-final", Role: "decode", Worker: "worker-0", PromptTokens: 8192, BlockSize: 16, Session: final("s-1")},
		{RequestID: "long-prompt", Role: "aggregated", Worker: "worker-0", PromptTokens: 200_000, BlockSize: 64, Session: middle("s-4")},
		{RequestID: "limit-prompt", Role: "prefill", Worker: "worker-0", PromptTokens: limitBlocks * 16, BlockSize: 16, Session: first("s-5")},
		{RequestID: "copy-1", Role: "prefill", Worker: "worker-1", PromptTokens: 16, BlockSize: 16, KVCopy: kvCopy(1)},
		{RequestID: "copy-64", Role: "prefill", Worker: "worker-1", PromptTokens: 1024, BlockSize: 16, Session: middle("s-2"), KVCopy: kvCopy(64)},
		{RequestID: "copy-8192", Role: "decode", Worker: "worker-1", PromptTokens: 131072, BlockSize: 16, Session: final("s-3"), KVCopy: kvCopy(8192)},
		{RequestID: "copy-limit", Role: "prefill", Worker: "worker-1", PromptTokens: limitBlocks * 16, BlockSize: 16, Session: first("s-6"), KVCopy: kvCopy(limitBlocks)},
		{RequestID: "copy-no-endpoint", Role: "prefill", Worker: "worker-1", PromptTokens: 256, BlockSize: 16,
			KVCopy: &hints.CommittedCopy{SourceWorker: "worker-src", BlockHashes: hashes(16)}},
	}
}

// Run checks that the provider's policies do what every hint policy must
// (docs/design.md, section 6, and the contract documented on hints.HintPolicy and
// hints.HintProvider), and logs, per booking, what each policy fired:
//
//   - the provider registers in the build's catalog (Suite.Catalog): a
//     DNS-label type, a Parse, default hosts that name registered
//     selections, a default-hosted Parse that accepts no parameters, and no
//     second default KVCopy sender under one selection;
//   - Parse is strict: an unknown key and a value of the wrong type are
//     refused with a *hints.ParamError naming the key, and so is a number
//     parameter given both .inf and -.inf in the hints YAML (which reach
//     Parse as the largest and smallest float64; Compile refuses the
//     non-finite values themselves), unless Suite.Unbounded names it; every
//     Suite.BadParams entry is refused;
//   - BuildHints neither panics nor returns an error (the dispatcher drops
//     the policy's actions and counts a failure for either), an ObjectWriter
//     error the policy passes on included;
//   - every action passes hints.CheckAction: a valid type and version, a
//     well-formed payload within hints.MaxPayloadBytes (plus room for the
//     booking's block hashes, which a kv.fetch carries whole), and the engine
//     consumer rules of its type (a kv.fetch carries a non-empty list of
//     block hashes and a non-empty source_control_endpoint, so a policy
//     sends no fetch for a copy without a source endpoint);
//   - a kv.fetch comes only from a provider that declares hints.KVCopy,
//     and at most one per booking; a booking yields at most 32 actions;
//   - the same booking gives the same actions, byte for byte, whatever ran
//     before it on the same HintContext and payload arena;
//   - each call returns actions of its own: a booking's actions do not
//     change when another booking is built while they are held (a policy
//     that returns a slice it keeps and appends into fails every time);
//   - the policy is safe for concurrent use: many goroutines on one policy
//     give each booking its own actions (run with -race);
//   - it keeps nothing of the HintContext or the booking after it returns:
//     Run overwrites both, and the arena, once BuildHints returns, and the
//     actions must not change; a payload that holds what Run wrote into a
//     returned context is reported as a retained HintContext;
//   - it does not block: a run that spent longer than the dispatcher's
//     deadline off the CPU, its thread asleep, on three tries, is reported
//     (checked on Linux, where the thread's CPU time and context switches
//     are counted, and on bookings with no copy or one of at most 64
//     blocks), in stronger words when the provider declares NeverBlocks;
//   - it does not modify the booking's block hashes;
//   - it asks for the committed KV copy only if its provider declares
//     hints.KVCopy;
//   - it fires on at least one booking, unless Suite.NeverFires.
//
// What Run cannot catch: a policy that misbehaves only on bookings that
// neither Suite.Bookings nor DefaultBookings reach; a block too short to
// overrun the deadline, or one only on long copies, which are not timed;
// blocking off Linux; and a race that -race does not see in the runs it
// makes. Payloads in its messages are escaped text: bytes that are not
// printable UTF-8 read as \xNN.
func Run(t *testing.T, p hints.HintProvider, s Suite) {
	t.Helper()
	r := check(p, s)
	for _, line := range r.fired {
		t.Log(line)
	}
	for _, err := range r.errs {
		t.Error(err)
	}
}

// Check runs the checks of Run and returns what failed, for tools that
// report outside a test.
func Check(p hints.HintProvider, s Suite) []error { return check(p, s).errs }

func check(p hints.HintProvider, s Suite) *report {
	r := &report{}
	base := s.Catalog
	if base == nil {
		base = builtin.NewCatalog()
	}
	if err := registerInBuild(base, p); err != nil {
		r.errorf("provider does not register in the build's catalog (Suite.Catalog; builtin.NewCatalog() when nil): %v", err)
		return r
	}
	params := s.Params
	if len(params) == 0 {
		params = []string{`{}`}
	}
	bookings := s.Bookings
	if len(bookings) == 0 {
		bookings = DefaultBookings()
	}
	checkStrict(r, p, params, s.BadParams, s.Unbounded)
	for i, raw := range params {
		policy, err := parse(p, raw)
		if err != nil {
			r.errorf("Params[%d] %s: refused: %v", i, raw, err)
			continue
		}
		pr := &report{prefix: fmt.Sprintf("parameters %s: ", raw)}
		want := checkBookings(pr, p, policy, bookings)
		fired := 0
		for j, out := range want {
			line := fmt.Sprintf("parameters %s: booking %s: ", raw, bookings[j].RequestID)
			switch {
			case out.panic != "":
				line += "panicked"
			case out.err != "":
				line += "error: " + escape(brief(out.err))
			case len(out.actions) == 0:
				line += "no actions"
			default:
				fired++
				line += fmt.Sprintf("%d action(s): %s", len(out.actions), briefBuilt(out))
			}
			r.fired = append(r.fired, line)
		}
		if fired == 0 && !s.NeverFires && len(pr.errs) == 0 {
			pr.errorf("the policy produced no action on any of the %d bookings, so nothing it sends was checked; give Suite.Bookings that make it fire, or set Suite.NeverFires if that is intended", len(bookings))
		}
		if len(pr.errs) == 0 {
			checkReuse(pr, p, policy, bookings, want)
		}
		if len(pr.errs) == 0 {
			checkConcurrent(pr, p, policy, bookings, want, s.Concurrency)
		}
		r.errs = append(r.errs, pr.errs...)
	}
	return r
}

// registerInBuild registers p in a copy of base, as the build would, so
// that the catalog's refusals are the kit's. base is left as it is.
func registerInBuild(base *hints.Catalog, p hints.HintProvider) error {
	cat := hints.NewCatalog()
	for _, sp := range base.SelectionProviders() {
		if err := cat.RegisterSelection(*sp); err != nil {
			return err
		}
	}
	for _, hp := range base.HintProviders() {
		if hp.Type == p.Type {
			continue // the provider under test, when it is a built-in
		}
		if err := cat.RegisterHint(*hp); err != nil {
			return err
		}
	}
	return cat.RegisterHint(p)
}

// report collects problems; it is safe for concurrent use.
type report struct {
	mu     sync.Mutex
	prefix string
	errs   []error
	fired  []string // what fired, per booking, for the test log
}

func (r *report) errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Errorf(r.prefix+format, args...))
}

// parse runs the provider's Parse as Compile does, a panic included.
func parse(p hints.HintProvider, raw string) (policy hints.HintPolicy, err error) {
	defer func() {
		if r := recover(); r != nil {
			//lint:ignore ST1005 the message starts with the method's name, Parse
			policy, err = nil, fmt.Errorf("Parse panicked: %v", r)
		}
	}()
	return p.Parse(hints.Params(raw))
}

const unknownKey = "hintstest_unknown_key"

// checkStrict feeds the provider parameters it must refuse.
func checkStrict(t *report, p hints.HintProvider, params []string, bad map[string]string, unbounded []string) {
	refusals := map[string]string{`{"` + unknownKey + `": 1}`: unknownKey}
	for raw, key := range bad {
		refusals[raw] = key
	}
	known := knownParams(p, params)
	for key, val := range known {
		wrongType := `"a string"`
		if _, isString := val.(string); isString {
			wrongType = `12345`
		}
		for _, v := range []string{wrongType, `[1, 2]`, `{"nested": 1}`} {
			refusals[fmt.Sprintf(`{%q: %s}`, key, v)] = key
		}
		if _, isNumber := val.(float64); isNumber {
			// JSON has no NaN or infinity: written as out-of-range literals
			// they must be refused as numbers of the wrong kind.
			for _, v := range []string{`1e400`, `-1e400`} {
				refusals[fmt.Sprintf(`{%q: %s}`, key, v)] = key
			}
		}
	}
	for _, raw := range slices.Sorted(mapKeys(refusals)) {
		key := refusals[raw]
		_, err := parse(p, raw)
		if err == nil {
			t.errorf("parameters %s: accepted; want a refusal naming %q", raw, key)
			continue
		}
		checkRefusal(t, "parameters "+raw, err, key)
	}
	for _, key := range slices.Sorted(mapKeys(known)) {
		if _, isNumber := known[key].(float64); !isNumber || slices.Contains(unbounded, key) {
			continue
		}
		checkRange(t, p, key)
	}
}

// checkRefusal checks that err names key as a *hints.ParamError should.
func checkRefusal(t *report, what string, err error, key string) {
	pe, ok := errors.AsType[*hints.ParamError](err)
	switch {
	case !ok && key != "":
		t.errorf("%s: error %q is a %T; want a *hints.ParamError naming %q (hints.DecodeParams returns one)", what, err, err, key)
	case ok && pe.Key != key:
		t.errorf("%s: error %q names key %q; want %q", what, err, pe.Key, key)
	}
}

// checkRange gives a number parameter .nan, .inf and -.inf through the
// hints YAML, as a role would write them, and hands Parse what the YAML
// read made of them. Compile refuses the non-finite values whatever Parse
// says, but what Parse receives is the largest float64 and its negation,
// and a parameter that accepts both has no range at all: any number a
// person writes runs.
func checkRange(t *report, p hints.HintProvider, key string) {
	accepted := 0
	for _, v := range []string{".inf", "-.inf", ".nan"} {
		raw, err := yamlParams(key, v)
		if err != nil {
			t.errorf("parameter %q: the kit could not write %s in a hints YAML: %v", key, v, err)
			return
		}
		_, err = parse(p, string(raw))
		if err == nil {
			if v != ".nan" {
				accepted++
			}
			continue
		}
		checkRefusal(t, fmt.Sprintf("parameter %q: %s from the hints YAML (Parse receives %s)", key, v, raw), err, key)
	}
	if accepted == 2 {
		t.errorf("parameter %q takes any number: .inf and -.inf in the hints YAML reach Parse as the largest and smallest float64, and both were accepted; check its range (hints.FloatInRange, FloatAtLeast or IntInRange), or name it in Suite.Unbounded if any value is meant to run", key)
	}
}

// yamlParams writes one parameter in a hints YAML and returns the
// parameters object the config's parser hands a provider.
func yamlParams(key, value string) (hints.Params, error) {
	doc := fmt.Sprintf("worker_selection:\n  decode:\n    type: kvcr\n    hints:\n    - type: probe\n      parameters: {%s: %s}\n", strconv.Quote(key), value)
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		return nil, err
	}
	e := cfg.WorkerSelection["decode"]
	if e == nil || e.Hints == nil || len(*e.Hints) != 1 {
		return nil, errors.New("the parsed config has no hint item")
	}
	return (*e.Hints)[0].Parameters, nil
}

// knownParams returns the parameters the provider shows: the effective
// parameters of each accepted object when its policy reports them, and the
// keys of the objects themselves, each with a value of its JSON type.
func knownParams(p hints.HintProvider, params []string) map[string]any {
	known := map[string]any{}
	add := func(js []byte) {
		var m map[string]any
		if json.Unmarshal(js, &m) == nil {
			for k, v := range m {
				known[k] = v
			}
		}
	}
	for _, raw := range params {
		add([]byte(raw))
		policy, err := parse(p, raw)
		if err != nil {
			continue
		}
		if rep, ok := policy.(hints.ParameterReporter); ok {
			if js, err := json.Marshal(rep.EffectiveParameters()); err == nil {
				add(js)
			}
		}
	}
	return known
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// built is one booking's actions, copied out as the dispatcher's envelope
// copies them.
type built struct {
	actions []string
	err     string
	panic   string
}

// scratch is reused across bookings as the dispatcher's pooled scratch is.
type scratch struct {
	hc      hints.HintContext
	arena   []byte
	actions [8]hints.Action // lent by HintContext.Actions
}

// returnedMarker is what Run writes into a HintContext once BuildHints has
// returned; a payload that holds it was built from a context the policy
// kept.
const returnedMarker = "hintstest-context-after-return"

// runOne builds one booking on sc as the dispatcher does, checks what the
// policy did with the context and the booking, copies the actions out, and
// then poisons everything the policy could have kept. With timed, it also
// reports whether the run blocked past the dispatcher's deadline.
func runOne(ctx context.Context, p hints.HintProvider, policy hints.HintPolicy, b Booking, sc *scratch) (built, []error) {
	out, problems, _ := runTimed(ctx, p, policy, b, sc, false)
	return out, problems
}

// blocked describes a run that overran the deadline and slept; empty if
// it did not, or if it was not timed.
type blocked string

func runTimed(ctx context.Context, p hints.HintProvider, policy hints.HintPolicy, b Booking, sc *scratch, timed bool) (built, []error, blocked) {
	var problems []error
	bk, host := sc.load(p, b)
	var out built
	// Only bookings whose work is small are timed: a policy that writes a
	// copy of tens of thousands of blocks allocates a megabyte, and may
	// wait for the garbage collector, under -race for longer than the
	// deadline, without blocking on anything of its own.
	timed = timed && (b.KVCopy == nil || len(b.KVCopy.BlockHashes) <= timedBlocks)
	actions, offCPU, slept, err := call(ctx, policy, &sc.hc, timed)
	var block blocked
	if timed && slept && offCPU > policyDeadline {
		block = blocked(fmt.Sprintf("was off the CPU for %v, over the dispatcher's default deadline of %v, and its thread slept", offCPU.Round(time.Microsecond), policyDeadline))
	}
	if pe, ok := err.(*panicError); ok {
		out.panic = pe.Error()
		problems = append(problems, fmt.Errorf("BuildHints panicked: %s; the dispatcher recovers it, drops the policy's actions and counts a failure", escape(pe.Error())))
		actions = nil
	} else if err != nil {
		out.err = err.Error()
		problems = append(problems, fmt.Errorf("BuildHints returned an error: %s; the dispatcher drops the policy's actions on the booking and counts a failure", escape(err.Error())))
	}
	if host.Denied {
		problems = append(problems, errors.New("the policy asked for the committed KV copy, but its provider does not declare hints.KVCopy, so it never sees one"))
	}
	if b.KVCopy != nil && !slices.Equal(b.KVCopy.BlockHashes, bk.KVCopy.BlockHashes) {
		problems = append(problems, errors.New("the policy modified the booking's block hashes; they belong to the router"))
	}
	if len(actions) > maxActions {
		problems = append(problems, fmt.Errorf("returned %d actions; a hint carries at most %d, and the dispatcher drops and counts the rest", len(actions), maxActions))
	}
	fetches := 0
	for i := range actions {
		a := &actions[i]
		if err := hints.CheckActionWithin(a, payloadLimit(b)); err != nil {
			problems = append(problems, fmt.Errorf("action %d: %s", i+1, escape(err.Error())))
		}
		if a.Type == hints.ActionKVFetch {
			fetches++
			if !p.Commitments.Has(hints.KVCopy) {
				problems = append(problems, fmt.Errorf("action %d: a kv.fetch from a provider that does not declare hints.KVCopy; only the role's KV copy sender may send one, so the dispatcher drops every action of the policy as malformed", i+1))
			}
			if fetches == 2 {
				problems = append(problems, fmt.Errorf("action %d: a second kv.fetch from one policy; engines run only a hint's first, so the dispatcher drops every action of the policy as malformed", i+1))
			}
		}
		got := a.Type + "@" + a.Version + " " + string(a.Payload.Bytes())
		if strings.Contains(got, returnedMarker) {
			problems = append(problems, fmt.Errorf("action %d holds %q, which the kit writes into a HintContext once BuildHints has returned: the policy keeps the HintContext (or memory it reaches) past its return", i+1, returnedMarker))
		}
		out.actions = append(out.actions, got)
	}
	// Overwrite the context and the booking: a policy that kept either, or
	// returned memory that aliases them, shows up as changed actions.
	// Payloads may live in the arena until the hint is encoded, which the
	// copies above stand for; the arena is overwritten after the check, so
	// that the next booking on this scratch finds no stale payload.
	sc.hc = hints.HintContext{RequestID: returnedMarker, Role: returnedMarker, Worker: returnedMarker, PromptTokens: -1, BlockSize: -1,
		Session: hints.Session{ID: returnedMarker}}
	if bk.KVCopy != nil {
		for i := range bk.KVCopy.BlockHashes {
			bk.KVCopy.BlockHashes[i] = 0
		}
		bk.KVCopy.SourceEndpoint, bk.KVCopy.SourceWorker = returnedMarker, returnedMarker
	}
	for i := range actions {
		a := &actions[i]
		if got := a.Type + "@" + a.Version + " " + string(a.Payload.Bytes()); got != out.actions[i] {
			problems = append(problems, fmt.Errorf("action %d changed once BuildHints had returned: it aliases the HintContext or the booking (%s, then %s)",
				i+1, escape(brief(out.actions[i])), escape(brief(got))))
		}
	}
	poison := sc.arena[:cap(sc.arena)]
	for i := range poison {
		poison[i] = 0xff
	}
	for i := range sc.actions {
		sc.actions[i] = hints.Action{Type: returnedMarker, Version: returnedMarker}
	}
	return out, problems, block
}

// panicError is a panic recovered from BuildHints.
type panicError struct{ value any }

func (p *panicError) Error() string { return fmt.Sprint(p.value) }

// call runs BuildHints, recovering a panic into a *panicError. Timed, the
// goroutine is locked to its thread, and call reports how long the run was
// off the CPU (wall time less the thread's CPU time) and whether the
// thread gave up the CPU of its own accord meanwhile: a run that slept.
func call(ctx context.Context, policy hints.HintPolicy, hc *hints.HintContext, timed bool) (actions []hints.Action, offCPU time.Duration, slept bool, err error) {
	var v0 int64
	var cpu0 time.Duration
	counted := false
	if timed {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		v0, cpu0, counted = threadUsage()
	}
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			actions, err = nil, &panicError{value: r}
		}
		if counted {
			wall := time.Since(start)
			if v1, cpu1, ok := threadUsage(); ok {
				offCPU, slept = wall-(cpu1-cpu0), v1 > v0
			}
		}
	}()
	actions, err = policy.BuildHints(ctx, hc)
	return actions, 0, false, err
}

// payloadLimit is the payload cap a dispatcher applies at the least to
// booking b: hints.MaxPayloadBytes, plus room for the booking's block
// hashes in decimal (at most 20 digits and a comma each), since a copy the
// dispatcher accepts is sent whole.
func payloadLimit(b Booking) int {
	if b.KVCopy == nil {
		return hints.MaxPayloadBytes
	}
	return hints.MaxPayloadBytes + 21*len(b.KVCopy.BlockHashes)
}

func cloneBooking(b Booking) Booking {
	if b.KVCopy != nil {
		c := *b.KVCopy
		c.BlockHashes = slices.Clone(c.BlockHashes)
		b.KVCopy = &c
	}
	return b
}

// load readies sc's HintContext for booking b as the dispatcher does, on a
// copy of the booking, and returns the copy and the context's host state.
func (sc *scratch) load(p hints.HintProvider, b Booking) (Booking, *hostbridge.State[hints.CommittedCopy, hints.Action]) {
	bk := cloneBooking(b)
	sc.hc = hints.HintContext{RequestID: bk.RequestID, Role: bk.Role, Worker: bk.Worker,
		PromptTokens: bk.PromptTokens, BlockSize: bk.BlockSize, Session: bk.Session}
	host := hostbridge.Of[hints.HintContext, hints.CommittedCopy, hints.Action](&sc.hc)
	host.KVCopy = bk.KVCopy
	host.Arena = sc.arena[:0]
	host.Actions = sc.actions[:0]
	host.Granted = uint8(p.Commitments)
	return bk, host
}

func newScratch() *scratch { return &scratch{arena: make([]byte, 0, 16<<10)} }

// blockTries is how many runs of a booking must all overrun and sleep
// before the kit reports that the policy blocks: a single run may overrun
// on a busy machine, and the runtime may park the thread once in a while.
const blockTries = 3

// checkBookings runs every booking once on one scratch, timed, and then in
// reverse order, alternating with a second scratch, and returns each
// booking's actions.
func checkBookings(t *report, p hints.HintProvider, policy hints.HintPolicy, bookings []Booking) []built {
	ctx := context.Background()
	sc, other := newScratch(), newScratch()
	first := make([]built, len(bookings))
	for i, b := range bookings {
		out, problems, block := runTimed(ctx, p, policy, b, sc, true)
		for try := 1; block != "" && try < blockTries; try++ {
			_, _, block = runTimed(ctx, p, policy, b, sc, true)
		}
		for _, err := range problems {
			t.errorf("booking %s: %v", b.RequestID, err)
		}
		switch {
		case block != "" && p.NeverBlocks:
			t.errorf("booking %s: BuildHints blocked although the provider declares NeverBlocks: it %s, on %d runs out of %d; a policy that declares NeverBlocks may only compute (the dispatcher keeps the actions of a NeverBlocks policy that overran)", b.RequestID, block, blockTries, blockTries)
		case block != "":
			t.errorf("booking %s: BuildHints blocked: it %s, on %d runs out of %d; the dispatcher drops the actions of a policy that overruns its deadline", b.RequestID, block, blockTries, blockTries)
		}
		first[i] = out
	}
	for i := len(bookings) - 1; i >= 0; i-- {
		if i%2 == 1 {
			sc, other = other, sc
		}
		out, problems := runOne(ctx, p, policy, bookings[i], sc)
		if !sameBuilt(out, first[i]) {
			t.errorf("booking %s: not deterministic: first %s, then %s%s", bookings[i].RequestID, briefBuilt(first[i]), briefBuilt(out), retained(problems))
		}
	}
	return first
}

// retained names a retained HintContext among a run's problems, for a
// message that would otherwise only say the output changed.
func retained(problems []error) string {
	for _, err := range problems {
		if strings.Contains(err.Error(), returnedMarker) {
			return "; " + err.Error()
		}
	}
	return ""
}

func sameBuilt(a, b built) bool {
	return a.err == b.err && a.panic == b.panic && slices.Equal(a.actions, b.actions)
}

// checkReuse builds a booking, holds its actions as the dispatcher holds
// them until the hint is encoded, builds another booking whose actions
// differ, and checks that the first booking's actions did not change. A
// policy that returns a slice or payload it keeps and fills again on every
// booking fails it every time; runs that copy each result out at once never
// see it, and -race only when two bookings happen to overlap. Each booking
// has its own context and arena, as concurrent bookings have, so only
// memory the policy keeps can be shared. want is each booking's first
// result; the first reuse found is reported.
func checkReuse(t *report, p hints.HintProvider, policy hints.HintPolicy, bookings []Booking, want []built) {
	ctx := context.Background()
	for i := range bookings {
		if len(want[i].actions) == 0 {
			continue
		}
		next := -1
		for k := 1; k < len(bookings); k++ {
			j := (i + k) % len(bookings)
			if want[j].panic == "" && !sameBuilt(want[j], want[i]) {
				next = j
				break
			}
		}
		if next < 0 {
			continue
		}
		first, second := newScratch(), newScratch()
		first.load(p, bookings[i])
		held, _, _, err := call(ctx, policy, &first.hc, false)
		if err != nil {
			continue
		}
		second.load(p, bookings[next])
		if _, _, _, err := call(ctx, policy, &second.hc, false); errors.As(err, new(*panicError)) {
			continue
		}
		for n := range held {
			a := &held[n]
			got := a.Type + "@" + a.Version + " " + string(a.Payload.Bytes())
			if n < len(want[i].actions) && got != want[i].actions[n] {
				t.errorf("booking %s: action %d changed when booking %s was built next (%s, then %s): the policy returns memory it reuses on every booking (a slice or payload it keeps and appends into); the dispatcher holds a booking's actions until its hint is encoded while other bookings run, so every call must return actions of its own",
					bookings[i].RequestID, n+1, bookings[next].RequestID, escape(brief(want[i].actions[n])), escape(brief(got)))
				return
			}
		}
	}
}

// checkConcurrent runs the bookings from many goroutines on one policy.
func checkConcurrent(t *report, p hints.HintProvider, policy hints.HintPolicy, bookings []Booking, want []built, n int) {
	if n <= 0 {
		n = 8
	}
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			ctx := context.Background()
			sc := newScratch()
			for r := range 4 {
				i := (g + r) % len(bookings)
				out, problems := runOne(ctx, p, policy, bookings[i], sc)
				if !sameBuilt(out, want[i]) {
					t.errorf("booking %s from %d goroutines: got %v, want %v%s", bookings[i].RequestID, n, briefBuilt(out), briefBuilt(want[i]), retained(problems))
				}
			}
		})
	}
	wg.Wait()
}

// briefBuilt shortens actions for a message, escaped: a fetch of 8,192
// blocks is 170 KB, and a payload read from a reused arena may hold any
// byte.
func briefBuilt(b built) string {
	var buf bytes.Buffer
	for _, a := range b.actions {
		buf.WriteString(escape(brief(a)))
		buf.WriteByte(';')
	}
	if b.err != "" {
		buf.WriteString("error: " + escape(brief(b.err)))
	}
	if b.panic != "" {
		buf.WriteString("panic: " + escape(brief(b.panic)))
	}
	return buf.String()
}

func brief(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// escape returns s as text a terminal and grep read as text: printable
// UTF-8 as it is, any other byte as \xNN and other runes as \uNNNN.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
