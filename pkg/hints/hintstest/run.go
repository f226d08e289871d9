package hintstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

// Suite says what to run a provider's policies on. Its zero value runs the
// default bookings with no parameters.
type Suite struct {
	// Params are parameter objects, as JSON, that the provider must
	// accept; every check runs on a policy parsed from each. Empty: `{}`.
	Params []string
	// BadParams maps parameter objects that the provider must refuse to
	// the key each refusal must name; "" for an error of the whole object.
	// They add to the refusals Run derives itself: an unknown key, and for
	// every parameter it can see, a value of the wrong type, NaN, and
	// infinities.
	BadParams map[string]string
	// Bookings are run through every policy. Empty: DefaultBookings.
	Bookings []Booking
	// Concurrency is how many goroutines run the bookings at once in the
	// concurrency check; 0 means 8. Run the test with -race.
	Concurrency int
}

// DefaultBookings are the bookings Run uses when a Suite names none: a
// request outside any session, a session's first and last turns, committed
// copies of 1, 64 and 8,192 blocks (a 128k-token prompt at block size 16),
// and a committed copy whose source advertised no control endpoint, which
// a policy must not turn into a kv.fetch (the engines refuse a fetch
// without a source).
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
	return []Booking{
		{RequestID: "plain", Role: "decode", Worker: "worker-0", PromptTokens: 512, BlockSize: 16},
		{RequestID: "session-first", Role: "decode", Worker: "worker-0", PromptTokens: 4096, BlockSize: 16,
			Session: hints.Session{ID: "s-1", Turn: 1}},
		{RequestID: "session-final", Role: "decode", Worker: "worker-0", PromptTokens: 8192, BlockSize: 16,
			Session: hints.Session{ID: "s-1", Turn: 4, Final: true}},
		{RequestID: "copy-1", Role: "prefill", Worker: "worker-1", PromptTokens: 16, BlockSize: 16, KVCopy: kvCopy(1)},
		{RequestID: "copy-64", Role: "prefill", Worker: "worker-1", PromptTokens: 1024, BlockSize: 16,
			Session: hints.Session{ID: "s-2", Turn: 2}, KVCopy: kvCopy(64)},
		{RequestID: "copy-8192", Role: "decode", Worker: "worker-1", PromptTokens: 131072, BlockSize: 16,
			Session: hints.Session{ID: "s-3", Turn: 1, Final: true}, KVCopy: kvCopy(8192)},
		{RequestID: "copy-no-endpoint", Role: "prefill", Worker: "worker-1", PromptTokens: 256, BlockSize: 16,
			KVCopy: &hints.CommittedCopy{SourceWorker: "worker-src", BlockHashes: hashes(16)}},
	}
}

// Run checks that the provider's policies do what every hint policy must
// (docs/design.md, section 6, and the contract documented on hints.HintPolicy and
// hints.HintProvider):
//
//   - the provider registers in a catalog (a DNS-label type, a Parse);
//   - Parse is strict: an unknown key, a value of the wrong type, NaN and
//     infinities are refused with a *hints.ParamError naming the key, and
//     every Suite.BadParams entry is refused;
//   - every action passes hints.CheckAction: a valid type and version, a
//     well-formed payload within hints.MaxPayloadBytes (plus room for the
//     booking's block hashes, which a kv.fetch carries whole), and the engine
//     consumer rules of its type (a kv.fetch carries a non-empty list of
//     block hashes and a non-empty source_control_endpoint, so a policy
//     sends no fetch for a copy without a source endpoint);
//   - the same booking gives the same actions, byte for byte, whatever ran
//     before it on the same HintContext and payload arena;
//   - the policy is safe for concurrent use: many goroutines on one policy
//     give each booking its own actions (run with -race);
//   - it keeps nothing of the HintContext or the booking after it returns:
//     Run overwrites both, and the arena, once BuildHints returns, and the
//     actions must not change;
//   - it does not modify the booking's block hashes;
//   - it asks for the committed KV copy only if its provider declares
//     hints.KVCopy.
func Run(t *testing.T, p hints.HintProvider, s Suite) {
	t.Helper()
	for _, err := range Check(p, s) {
		t.Error(err)
	}
}

// Check runs the checks of Run and returns what failed, for tools that
// report outside a test.
func Check(p hints.HintProvider, s Suite) []error {
	var r report
	if err := hints.NewCatalog().RegisterHint(p); err != nil {
		r.errorf("provider does not register: %v", err)
		return r.errs
	}
	params := s.Params
	if len(params) == 0 {
		params = []string{`{}`}
	}
	bookings := s.Bookings
	if len(bookings) == 0 {
		bookings = DefaultBookings()
	}
	checkStrict(&r, p, params, s.BadParams)
	for i, raw := range params {
		policy, err := parse(p, raw)
		if err != nil {
			r.errorf("Params[%d] %s: refused: %v", i, raw, err)
			continue
		}
		pr := report{prefix: fmt.Sprintf("parameters %s: ", raw)}
		want := checkBookings(&pr, p, policy, bookings)
		if len(pr.errs) == 0 {
			checkConcurrent(&pr, p, policy, bookings, want, s.Concurrency)
		}
		r.errs = append(r.errs, pr.errs...)
	}
	return r.errs
}

// report collects problems; it is safe for concurrent use.
type report struct {
	mu     sync.Mutex
	prefix string
	errs   []error
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
func checkStrict(t *report, p hints.HintProvider, params []string, bad map[string]string) {
	refusals := map[string]string{`{"` + unknownKey + `": 1}`: unknownKey}
	for raw, key := range bad {
		refusals[raw] = key
	}
	for key, val := range knownParams(p, params) {
		wrongType := `"a string"`
		if _, isString := val.(string); isString {
			wrongType = `12345`
		}
		for _, v := range []string{wrongType, `[1, 2]`, `{"nested": 1}`} {
			refusals[fmt.Sprintf(`{%q: %s}`, key, v)] = key
		}
		if _, isNumber := val.(float64); isNumber {
			// JSON has no NaN or infinity: they arrive as out-of-range
			// literals or as the strings YAML and JavaScript spell them.
			for _, v := range []string{`1e400`, `-1e400`, `"NaN"`, `".nan"`, `"Infinity"`, `".inf"`} {
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
		pe, ok := errors.AsType[*hints.ParamError](err)
		switch {
		case !ok && key != "":
			t.errorf("parameters %s: error %q is a %T; want a *hints.ParamError naming %q (hints.DecodeParams returns one)", raw, err, err, key)
		case ok && pe.Key != key:
			t.errorf("parameters %s: error %q names key %q; want %q", raw, err, pe.Key, key)
		}
	}
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
}

// scratch is reused across bookings as the dispatcher's pooled scratch is.
type scratch struct {
	hc    hints.HintContext
	arena []byte
}

// runOne builds one booking on sc as the dispatcher does, checks what the
// policy did with the context and the booking, copies the actions out, and
// then poisons everything the policy could have kept.
func runOne(ctx context.Context, p hints.HintProvider, policy hints.HintPolicy, b Booking, sc *scratch) (built, []error) {
	var problems []error
	bk := cloneBooking(b)
	sc.hc = hints.HintContext{RequestID: bk.RequestID, Role: bk.Role, Worker: bk.Worker,
		PromptTokens: bk.PromptTokens, BlockSize: bk.BlockSize, Session: bk.Session}
	host := hostbridge.Of[hints.HintContext, hints.CommittedCopy](&sc.hc)
	host.KVCopy = bk.KVCopy
	host.Arena = sc.arena[:0]
	host.Granted = uint8(p.Commitments)
	actions, err := policy.BuildHints(ctx, &sc.hc)
	if host.Denied {
		problems = append(problems, errors.New("the policy asked for the committed KV copy, but its provider does not declare hints.KVCopy, so it never sees one"))
	}
	if b.KVCopy != nil && !slices.Equal(b.KVCopy.BlockHashes, bk.KVCopy.BlockHashes) {
		problems = append(problems, errors.New("the policy modified the booking's block hashes; they belong to the router"))
	}
	var out built
	if err != nil {
		out.err = err.Error()
	}
	for i := range actions {
		a := &actions[i]
		if err := hints.CheckActionWithin(a, payloadLimit(b)); err != nil {
			problems = append(problems, fmt.Errorf("action %d: %w", i+1, err))
		}
		out.actions = append(out.actions, a.Type+"@"+a.Version+" "+string(a.Payload.Bytes()))
	}
	// Overwrite the context and the booking: a policy that kept either, or
	// returned memory that aliases them, shows up as changed actions.
	// Payloads may live in the arena until the hint is encoded, which the
	// copies above stand for; the arena is overwritten after the check, so
	// that the next booking on this scratch finds no stale payload.
	sc.hc = hints.HintContext{RequestID: "poisoned", Role: "poisoned", Worker: "poisoned", PromptTokens: -1, BlockSize: -1}
	if bk.KVCopy != nil {
		for i := range bk.KVCopy.BlockHashes {
			bk.KVCopy.BlockHashes[i] = 0
		}
		bk.KVCopy.SourceEndpoint, bk.KVCopy.SourceWorker = "poisoned", "poisoned"
	}
	for i := range actions {
		a := &actions[i]
		if got := a.Type + "@" + a.Version + " " + string(a.Payload.Bytes()); got != out.actions[i] {
			problems = append(problems, fmt.Errorf("action %d changed once BuildHints had returned: it aliases the HintContext or the booking (%s, then %s)",
				i+1, brief(out.actions[i]), brief(got)))
		}
	}
	poison := sc.arena[:cap(sc.arena)]
	for i := range poison {
		poison[i] = 0xff
	}
	return out, problems
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

func newScratch() *scratch { return &scratch{arena: make([]byte, 0, 16<<10)} }

// checkBookings runs every booking twice on one scratch, in order and then
// in reverse, and returns each booking's actions.
func checkBookings(t *report, p hints.HintProvider, policy hints.HintPolicy, bookings []Booking) []built {
	ctx := context.Background()
	sc := newScratch()
	first := make([]built, len(bookings))
	for i, b := range bookings {
		out, problems := runOne(ctx, p, policy, b, sc)
		for _, err := range problems {
			t.errorf("booking %s: %v", b.RequestID, err)
		}
		first[i] = out
	}
	for i := len(bookings) - 1; i >= 0; i-- {
		out, _ := runOne(ctx, p, policy, bookings[i], sc)
		if !sameBuilt(out, first[i]) {
			t.errorf("booking %s: not deterministic: first %s, then %s", bookings[i].RequestID, briefBuilt(first[i]), briefBuilt(out))
		}
	}
	return first
}

func sameBuilt(a, b built) bool { return a.err == b.err && slices.Equal(a.actions, b.actions) }

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
				out, _ := runOne(ctx, p, policy, bookings[i], sc)
				if !sameBuilt(out, want[i]) {
					t.errorf("booking %s from %d goroutines: got %v, want %v", bookings[i].RequestID, n, briefBuilt(out), briefBuilt(want[i]))
				}
			}
		})
	}
	wg.Wait()
}

// briefBuilt shortens actions for a message: a fetch of 8,192 blocks is
// 170 KB.
func briefBuilt(b built) string {
	var buf bytes.Buffer
	for _, a := range b.actions {
		buf.WriteString(brief(a))
		buf.WriteByte(';')
	}
	if b.err != "" {
		buf.WriteString("error: " + b.err)
	}
	return buf.String()
}

func brief(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}
