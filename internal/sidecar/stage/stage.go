// Package stage books a router's bookings through its rollout stage. With
// no candidate staged, a booking goes to the stable dispatcher alone, at
// the cost of one atomic load. In a shadow stage the stable dispatcher
// books and delivers, and the candidate's dispatcher builds the same
// booking beside it (nothing is delivered): the two messages are compared
// and the bookings whose hints would change are counted, by action type
// and role. In a canary stage a hash of the booking's session (else its
// request), salted by the candidate's hash, picks the bookings the
// candidate makes, the stage's weight in percent of them, so a session
// always runs on the same config, in every pod, and each candidate tries
// a different share of sessions.
//
// The candidate's dispatcher takes the Workers of New's options: the
// sidecar gives it the registry as the candidate sees it
// (workers.Registry.Candidate), the same workers in the candidate's own
// worker pools, so that its bookings are held to its RouterRoles'
// workerSelectors before it is promoted. A candidate that does not load is
// refused (the sidecar's NACK): nothing of the stable path changes, and
// Status says why.
//
// It imports pkg/dispatch, internal/rolloutapi and client_golang; nothing
// of the sidecar.
package stage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// Stage books through the stable dispatcher and, while a rollout stages a
// candidate, the candidate's. It is safe for concurrent use; Load, Refuse
// and Clear are called by the config source, Book by every booking.
type Stage struct {
	stable *dispatch.Dispatcher
	// opts are the options of every candidate's dispatcher.
	opts    dispatch.Options
	metrics *metrics

	cur atomic.Pointer[candidate]

	// mu serialises Load, Refuse and Clear, and guards status and
	// refused.
	mu     sync.Mutex
	status *rolloutapi.CandidateStatus
	// refused is the hash of the candidate whose config did not load, the
	// error in status; "" when none was.
	refused string

	// bufs lend the shadow's Build the memory of its message.
	bufs sync.Pool
}

// candidate is a loaded candidate and the stage it runs in; a new stage of
// the same candidate is a new candidate value sharing d and counts.
type candidate struct {
	d      *dispatch.Dispatcher
	hash   string
	stage  rolloutapi.StageName
	weight uint64
	// seed salts the canary split (Seed of hash).
	seed   uint64
	counts *counts
}

// New returns a stage that books through stable. Candidates get
// dispatchers of their own with opts less its Metrics (its Workers are
// the workers as candidates see them): a candidate's
// dispatcher records none, so that the dispatcher's series stay the
// stable config's. The shadow counters are registered with reg (nil keeps
// them unregistered).
func New(stable *dispatch.Dispatcher, opts dispatch.Options, reg prometheus.Registerer) *Stage {
	opts.Metrics = nil
	opts.Log = opts.Log.WithName("candidate")
	s := &Stage{stable: stable, opts: opts, metrics: newMetrics(reg)}
	s.bufs.New = func() any { b := make([]byte, 0, shadowBufBytes); return &b }
	return s
}

// shadowBufBytes is the message memory a pooled shadow buffer starts
// with; maxShadowBufBytes the most one keeps in the pool.
const (
	shadowBufBytes    = 4 << 10
	maxShadowBufBytes = 256 << 10
)

// Book books b through the stage in force, as Dispatcher.Book does.
// Hint.ConfigHash is the hash of the config that booked it.
func (s *Stage) Book(ctx context.Context, b *dispatch.Booking) (dispatch.Hint, error) {
	c := s.cur.Load()
	if c == nil {
		return s.stable.Book(ctx, b)
	}
	if c.stage == rolloutapi.StageCanary {
		if Picks(b, c.seed, c.weight) {
			h, err := c.d.Book(ctx, b)
			if err == nil {
				return h, nil
			}
			// The candidate cannot book it (a role it lacks): the stable
			// config does, as it would have without a rollout.
		}
		return s.stable.Book(ctx, b)
	}
	h, err := s.stable.Book(ctx, b)
	if err != nil {
		return h, err
	}
	s.shadow(ctx, c, b, h)
	return h, nil
}

// Seed is the salt of a candidate's canary split: FNV-1a's state after
// the candidate's config hash. Salting by the candidate keeps a session on
// one config for the whole rollout (and in every pod, which hash the same
// candidate), and gives each rollout its own canary sessions: unsalted,
// the same sessions would try every candidate first, and whatever sets
// them apart from the rest would bias every rollout the same way. Seed("")
// is FNV-1a's offset basis.
func Seed(candidate string) uint64 {
	return fnv1a(14695981039346656037, candidate)
}

// Picks reports whether a canary of weight percent, salted by seed (Seed),
// books b: FNV-1a of the booking's session ID, else of its request ID,
// continued from seed, modulo 100, is below the weight. A session's
// bookings are all on the same config, and a session picked at one weight
// is picked at every larger one.
func Picks(b *dispatch.Booking, seed, weight uint64) bool {
	key := b.Session.ID
	if key == "" {
		key = b.RequestID
	}
	return fnv1a(seed, key)%100 < weight
}

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// shadow builds b with the candidate and compares its message with the
// one the stable config sent.
func (s *Stage) shadow(ctx context.Context, c *candidate, b *dispatch.Booking, stable dispatch.Hint) {
	bp := s.bufs.Get().(*[]byte)
	h, err := c.d.BuildInto(ctx, b, (*bp)[:0])
	rm := s.metrics.role(b.Role)
	c.counts.bookings.Add(1)
	switch {
	case err != nil:
		c.counts.candidateErrors.Add(1)
		rm.candidateError.Inc()
	case bytes.Equal(stable.Message, h.Message):
		rm.same.Inc()
	default:
		types := differingActions(stable.Message, h.Message)
		c.counts.differ.Add(1)
		rm.differ.Inc()
		c.counts.add(b.Role, types)
		for _, t := range types {
			s.metrics.actionDiff(b.Role, t).Inc()
		}
	}
	if cap(h.Message) <= maxShadowBufBytes && cap(h.Message) > 0 {
		*bp = h.Message[:0]
	}
	s.bufs.Put(bp)
}

// unreadableAction is the action type counted when a message does not
// parse (a dispatcher's own messages always do).
const unreadableAction = "unreadable"

// action is one action of a hint message, its parts as slices of it.
type action struct{ typ, version, payload []byte }

// differingActions are the action types whose actions differ between two
// messages, in the order they first appear: a type differs when the two
// messages hold a different sequence of its actions (version and payload;
// the action IDs are positions, not content). A message that does not
// parse counts as unreadableAction.
func differingActions(a, b []byte) []string {
	var bufA, bufB [dispatch.MaxActions]action
	xa, okA := scanActions(a, bufA[:0])
	xb, okB := scanActions(b, bufB[:0])
	if !okA || !okB {
		return []string{unreadableAction}
	}
	var out []string
	for i, x := range xa {
		if firstOfType(xa, i) && !sameOfType(xa, xb, x.typ) {
			out = append(out, string(x.typ))
		}
	}
	for i, y := range xb {
		if firstOfType(xb, i) && !hasType(xa, y.typ) {
			out = append(out, string(y.typ))
		}
	}
	return out
}

// firstOfType reports whether acts[i] is the first action of its type.
func firstOfType(acts []action, i int) bool {
	for _, a := range acts[:i] {
		if bytes.Equal(a.typ, acts[i].typ) {
			return false
		}
	}
	return true
}

func hasType(acts []action, typ []byte) bool {
	for _, a := range acts {
		if bytes.Equal(a.typ, typ) {
			return true
		}
	}
	return false
}

// sameOfType reports whether a and b hold the same sequence of actions of
// type typ.
func sameOfType(a, b []action, typ []byte) bool {
	i, j := 0, 0
	for {
		for i < len(a) && !bytes.Equal(a[i].typ, typ) {
			i++
		}
		for j < len(b) && !bytes.Equal(b[j].typ, typ) {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if !bytes.Equal(a[i].version, b[j].version) || !bytes.Equal(a[i].payload, b[j].payload) {
			return false
		}
		i, j = i+1, j+1
	}
}

// The fixed parts of the envelope a dispatcher writes (dispatch's
// encodeMessage); each action's ID, type and version end at a quote.
var (
	envelopeHead  = []byte(`{"protocol_version":"` + dispatch.ProtocolVersion + `","message_id":`)
	envelopeOpen  = []byte(`,"actions":[`)
	actionHead    = []byte(`{"action_id":"a`)
	actionType    = []byte(`","action_type":"`)
	actionVersion = []byte(`,"action_version":"`)
	actionPayload = []byte(`,"payload":`)
)

// scanActions appends the actions of msg, a message in the form a
// dispatcher writes it, to dst, without copying or allocating; false when
// msg is not in that form. An empty msg has no actions.
func scanActions(msg []byte, dst []action) ([]action, bool) {
	if len(msg) == 0 {
		return dst, true
	}
	rest, ok := bytes.CutPrefix(msg, envelopeHead)
	if !ok {
		return dst, false
	}
	n := skipValue(rest)
	if n <= 0 || rest[0] != '"' {
		return dst, false
	}
	if rest, ok = bytes.CutPrefix(rest[n:], envelopeOpen); !ok {
		return dst, false
	}
	for len(rest) > 0 && rest[0] != ']' {
		if len(dst) > 0 {
			if rest[0] != ',' {
				return dst, false
			}
			rest = rest[1:]
		}
		if rest, ok = bytes.CutPrefix(rest, actionHead); !ok {
			return dst, false
		}
		for len(rest) > 0 && rest[0] >= '0' && rest[0] <= '9' {
			rest = rest[1:]
		}
		var a action
		if rest, ok = bytes.CutPrefix(rest, actionType); !ok {
			return dst, false
		}
		if a.typ, rest, ok = bytes.Cut(rest, []byte{'"'}); !ok {
			return dst, false
		}
		if rest, ok = bytes.CutPrefix(rest, actionVersion); !ok {
			return dst, false
		}
		if a.version, rest, ok = bytes.Cut(rest, []byte{'"'}); !ok {
			return dst, false
		}
		if rest, ok = bytes.CutPrefix(rest, actionPayload); !ok {
			return dst, false
		}
		n := skipValue(rest)
		if n <= 0 || n >= len(rest) || rest[n] != '}' {
			return dst, false
		}
		a.payload, rest = rest[:n], rest[n+1:]
		if len(dst) >= dispatch.MaxActions {
			return dst, false
		}
		dst = append(dst, a)
	}
	if !bytes.Equal(rest, []byte("]}")) {
		return dst, false
	}
	return dst, true
}

// skipValue is the length of the JSON value b starts with (an object, an
// array, a string or a literal), or 0 when b does not start with a whole
// one. It tracks strings and nesting only: the dispatcher checked the
// payloads' JSON.
func skipValue(b []byte) int {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return 0
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a literal
			}
			depth--
		case ',', ':':
			if depth == 0 {
				return i
			}
		default:
			if depth == 0 && (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
				return i
			}
		}
		if depth == 0 {
			// A string, or a closed object or array, ends here; a literal
			// runs on to its delimiter.
			if c := b[i]; c == '"' || c == '}' || c == ']' {
				return i + 1
			}
		}
	}
	if depth == 0 {
		return len(b)
	}
	return 0
}

// Load stages cfg as the candidate in stage st. The candidate in force,
// if it has cfg's hash, keeps its dispatcher and its shadow counts and
// only changes stage; another is replaced. A candidate that does not load
// is refused: no candidate runs (the stable config books everything) and
// Status carries the error.
func (s *Stage) Load(cfg dispatch.Config, st rolloutapi.Stage, origin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := st.Validate(); err != nil {
		s.refuseLocked(st, err)
		return err
	}
	if cfg.Hash != "" && cfg.Hash != st.Candidate {
		err := fmt.Errorf("the stage names candidate %s but the candidate config hashes to %s", st.Candidate, cfg.Hash)
		s.refuseLocked(st, err)
		return err
	}
	cfg.Hash = st.Candidate
	if cur := s.cur.Load(); cur != nil && cur.hash == st.Candidate {
		next := &candidate{d: cur.d, hash: cur.hash, stage: st.Stage, weight: uint64(st.Weight), seed: cur.seed, counts: cur.counts}
		s.cur.Store(next)
		s.status = &rolloutapi.CandidateStatus{Assigned: st.Candidate, Active: st.Candidate, Stage: st.Stage, Weight: st.Weight}
		return nil
	}
	if s.refused != "" && s.refused == st.Candidate && s.status != nil {
		// Refused already: the same config fails the same way; a source
		// that rereads it (a poll) neither compiles nor logs it again.
		err := errors.New(s.status.Error)
		s.refuseLocked(st, err)
		s.refused = st.Candidate
		return err
	}
	d := dispatch.NewDispatcher(s.opts)
	if err := d.LoadConfig(cfg, origin); err != nil {
		s.refuseLocked(st, err)
		s.refused = st.Candidate
		return err
	}
	s.cur.Store(&candidate{d: d, hash: st.Candidate, stage: st.Stage, weight: uint64(st.Weight), seed: Seed(st.Candidate), counts: &counts{}})
	s.status = &rolloutapi.CandidateStatus{Assigned: st.Candidate, Active: st.Candidate, Stage: st.Stage, Weight: st.Weight}
	return nil
}

// Refuse refuses the candidate st names, for err (a candidate the config
// source could not read): no candidate runs, and Status says why.
func (s *Stage) Refuse(st rolloutapi.Stage, err error) {
	if err == nil {
		err = errors.New("refused")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseLocked(st, err)
}

func (s *Stage) refuseLocked(st rolloutapi.Stage, err error) {
	s.cur.Store(nil)
	s.refused = ""
	s.status = &rolloutapi.CandidateStatus{Assigned: st.Candidate, Stage: st.Stage, Weight: st.Weight, Error: err.Error()}
}

// Clear drops the candidate, if any: the stable config books everything
// and the candidate's dispatcher is released.
func (s *Stage) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur.Store(nil)
	s.status, s.refused = nil, ""
}

// Status is what the stage does with the candidate: nil when none is
// staged.
func (s *Stage) Status() *rolloutapi.CandidateStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == nil {
		return nil
	}
	st := *s.status
	return &st
}

// Candidate is the candidate's dispatcher, or nil when none runs.
func (s *Stage) Candidate() *dispatch.Dispatcher {
	if c := s.cur.Load(); c != nil {
		return c.d
	}
	return nil
}

// Shadow are the shadow comparisons of the candidate loaded, by its hash,
// counted since it was loaded; nil when no candidate runs. The sidecar's
// outcomes route serves them.
func (s *Stage) Shadow() map[string]*rolloutapi.ShadowCounts {
	c := s.cur.Load()
	if c == nil {
		return nil
	}
	return map[string]*rolloutapi.ShadowCounts{c.hash: c.counts.snapshot()}
}

// counts are a candidate's shadow comparisons.
type counts struct {
	bookings, differ, candidateErrors atomic.Int64

	mu               sync.Mutex
	byAction, byRole map[string]int64
}

// maxCountKeys bounds the action types and roles a candidate's counts
// keep apart; the rest are counted under "other".
const maxCountKeys = 64

func (c *counts) add(role string, types []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byAction == nil {
		c.byAction, c.byRole = map[string]int64{}, map[string]int64{}
	}
	bump(c.byRole, role)
	for _, t := range types {
		bump(c.byAction, t)
	}
}

func bump(m map[string]int64, k string) {
	if _, ok := m[k]; !ok && len(m) >= maxCountKeys {
		k = otherLabel
	}
	m[k]++
}

func (c *counts) snapshot() *rolloutapi.ShadowCounts {
	out := &rolloutapi.ShadowCounts{Bookings: c.bookings.Load(), Differ: c.differ.Load(), CandidateErrors: c.candidateErrors.Load()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byAction) > 0 {
		out.ByAction = maps.Clone(c.byAction)
	}
	if len(c.byRole) > 0 {
		out.ByRole = maps.Clone(c.byRole)
	}
	return out
}
