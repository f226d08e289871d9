// Package outcomes keeps the outcomes of the requests a router pod's
// sidecar booked, by the hash of the config that booked each, for a staged
// rollout's analysis: the router reports each request's outcome (POST
// /v1/outcomes, a bookingapi.Outcome), the manager reads them back by
// config hash (GET rolloutapi.OutcomesPath on the ops listener) and
// compares the candidate's requests with the stable config's.
//
// Memory is bounded: each config hash has a ring of at most PerHash
// samples, the oldest overwritten and counted as dropped; at most
// MaxHashes hashes are held, the one reported least recently forgotten
// (with its Prometheus series) when another arrives. An answer holds at
// most twice PerHash samples (a stable and a candidate config's full
// rings), the newest of the hashes reported most recently: under 8 MiB of
// JSON at the defaults and the longest fields an outcome may have
// (MaxAnswerBytes).
//
// It imports pkg/bookingapi, internal/rolloutapi and Prometheus; nothing
// else of the sidecar.
package outcomes

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

// Default bounds of a Store.
const (
	DefaultPerHash   = 16384
	DefaultMaxHashes = 4
	// MaxAnswerBytes is what an answer of the default bounds stays
	// within, and what the manager's analysis reads at most.
	MaxAnswerBytes = 8 << 20
	// MaxRolesPerHash bounds the roles one config hash is reported for,
	// and so the series of the role label.
	MaxRolesPerHash = 64
	// MaxRoleBytes bounds a role's name: a DNS label's length.
	MaxRoleBytes = 63
	// MaxPromptTokens bounds an outcome's prompt: 16 Mi tokens, past any
	// model's context.
	MaxPromptTokens = 1 << 24
	// maxRunsPerHash bounds the record of a hash's dropped samples (see
	// ring.dropped).
	maxRunsPerHash = 1024
)

// ErrTooManyRoles is the error of an outcome whose role would pass
// MaxRolesPerHash for its config hash.
var ErrTooManyRoles = errors.New("too many roles for one config hash")

// Options configure a Store.
type Options struct {
	// PerHash bounds the samples held per config hash; 0 means
	// DefaultPerHash.
	PerHash int
	// MaxHashes bounds the config hashes held; 0 means DefaultMaxHashes.
	MaxHashes int
	// MaxAnswer bounds the samples Since returns; 0 means twice PerHash.
	MaxAnswer int
	// Metrics, when set, counts every outcome kept in Prometheus series.
	Metrics *Metrics
	// Now is the clock that stamps samples; nil means time.Now.
	Now func() time.Time
}

// Store holds outcomes by config hash. It is safe for concurrent use.
type Store struct {
	opts Options

	mu    sync.Mutex
	rings map[string]*ring
}

// NewStore returns an empty store.
func NewStore(o Options) *Store {
	if o.PerHash <= 0 {
		o.PerHash = DefaultPerHash
	}
	if o.MaxHashes <= 0 {
		o.MaxHashes = DefaultMaxHashes
	}
	if o.MaxAnswer <= 0 {
		o.MaxAnswer = 2 * o.PerHash
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{opts: o, rings: map[string]*ring{}}
}

// Check says what is wrong with an outcome, naming the field, or nil.
func Check(o *bookingapi.Outcome) error {
	var errs []error
	if o.Role == "" {
		errs = append(errs, errors.New("role is required"))
	} else if len(o.Role) > MaxRoleBytes {
		errs = append(errs, fmt.Errorf("role is %d bytes, over %d", len(o.Role), MaxRoleBytes))
	}
	if !rolloutapi.ValidHash(o.ConfigHash) {
		errs = append(errs, fmt.Errorf("config_hash %q is not a config hash (16 lower-case hex digits: the booking answer's %s)", o.ConfigHash, bookingapi.HeaderConfigHash))
	}
	if o.PromptTokens < 0 || o.PromptTokens > MaxPromptTokens {
		errs = append(errs, fmt.Errorf("prompt_tokens %d is not within 0 and %d", o.PromptTokens, MaxPromptTokens))
	}
	if o.CachedTokens < 0 || o.CachedTokens > o.PromptTokens {
		errs = append(errs, fmt.Errorf("cached_tokens %d is not within 0 and prompt_tokens (%d)", o.CachedTokens, o.PromptTokens))
	}
	if len(o.SessionID) > bookingapi.MaxSessionIDBytes {
		errs = append(errs, fmt.Errorf("session_id is %d bytes, over %d", len(o.SessionID), bookingapi.MaxSessionIDBytes))
	}
	if math.IsNaN(o.TTFTSeconds) || o.TTFTSeconds < 0 || o.TTFTSeconds > 24*3600 {
		errs = append(errs, fmt.Errorf("ttft_seconds %v is not within 0 and a day", o.TTFTSeconds))
	}
	return errors.Join(errs...)
}

// Add keeps an outcome, stamped with the store's clock. An outcome Check
// refuses is refused with its error, as is one whose role would pass
// MaxRolesPerHash (ErrTooManyRoles).
func (s *Store) Add(o *bookingapi.Outcome) error {
	if err := Check(o); err != nil {
		return err
	}
	smp := rolloutapi.Sample{At: s.opts.Now().UnixMilli(), Role: o.Role, Session: rolloutapi.SessionKey(o.SessionID), Prompt: int64(o.PromptTokens), Cached: int64(o.CachedTokens),
		TTFTMicros: int64(o.TTFTSeconds * 1e6), Error: o.Error != "", HintRejected: o.HintRejected}
	s.mu.Lock()
	r := s.rings[o.ConfigHash]
	if r == nil {
		if len(s.rings) >= s.opts.MaxHashes {
			s.forgetOldestLocked()
		}
		r = &ring{roles: map[string]*series{}}
		s.rings[o.ConfigHash] = r
	}
	sr, ok := r.roles[o.Role]
	if !ok {
		if len(r.roles) >= MaxRolesPerHash {
			s.mu.Unlock()
			return fmt.Errorf("role %q: config %s has outcomes of %d roles already: %w", o.Role, o.ConfigHash, MaxRolesPerHash, ErrTooManyRoles)
		}
		sr = s.opts.Metrics.series(o.Role, o.ConfigHash)
		r.roles[o.Role] = sr
	}
	r.add(smp, s.opts.PerHash)
	// Under the lock: a hash forgotten meanwhile must not get its series
	// back.
	sr.observe(o)
	s.mu.Unlock()
	return nil
}

// forgetOldestLocked forgets the hash reported least recently, and its
// series.
func (s *Store) forgetOldestLocked() {
	var (
		oldest string
		at     int64 = math.MaxInt64
	)
	for h, r := range s.rings {
		if last := r.last(); last < at || (last == at && h < oldest) {
			oldest, at = h, last
		}
	}
	delete(s.rings, oldest)
	s.opts.Metrics.forget(oldest)
}

// Since returns the samples held that were reported at or after since
// (Unix milliseconds), by config hash, oldest first, with the count of
// those reported since then that it does not return: no longer held, or
// past the answer's bound (Options.MaxAnswer), which the hashes reported
// most recently fill first, each with its newest samples. A hash with
// neither is left out.
func (s *Store) Since(since int64) map[string]*rolloutapi.ConfigOutcomes {
	s.mu.Lock()
	defer s.mu.Unlock()
	hashes := make([]string, 0, len(s.rings))
	for h := range s.rings {
		hashes = append(hashes, h)
	}
	slices.SortFunc(hashes, func(a, b string) int { return -cmp.Compare(s.rings[a].last(), s.rings[b].last()) })
	budget := s.opts.MaxAnswer
	out := make(map[string]*rolloutapi.ConfigOutcomes, len(s.rings))
	for _, h := range hashes {
		r := s.rings[h]
		samples, left := r.since(since, budget)
		budget -= len(samples)
		c := &rolloutapi.ConfigOutcomes{Samples: samples, Dropped: r.droppedSince(since) + int64(left)}
		if len(c.Samples) > 0 || c.Dropped > 0 {
			out[h] = c
		}
	}
	return out
}

// Hashes returns the config hashes held, sorted.
func (s *Store) Hashes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := make([]string, 0, len(s.rings))
	for h := range s.rings {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	return hs
}

// ring is one config hash's samples, oldest first from first, in the
// order reported (and so of At, the store's clock).
type ring struct {
	samples []rolloutapi.Sample
	first   int
	// roles are the roles reported, with their series (nil without
	// metrics).
	roles map[string]*series
	// dropped records the samples overwritten, as runs of the same At,
	// oldest first: runs of at most maxRunsPerHash, past which the two
	// oldest merge into one stamped with the later At, so that a query
	// counts a merged run whole when any of it may be after its start.
	// Recent drops are counted exactly, old ones at worst over.
	dropped []dropRun
}

type dropRun struct {
	at    int64
	count int64
}

func (r *ring) add(s rolloutapi.Sample, limit int) {
	// A wall clock stepped back must not break the order since relies on.
	s.At = max(s.At, r.last())
	if len(r.samples) < limit {
		r.samples = append(r.samples, s)
		return
	}
	r.drop(r.samples[r.first].At)
	r.samples[r.first] = s
	r.first = (r.first + 1) % len(r.samples)
}

func (r *ring) drop(at int64) {
	if n := len(r.dropped); n > 0 && r.dropped[n-1].at == at {
		r.dropped[n-1].count++
		return
	}
	if len(r.dropped) >= maxRunsPerHash {
		r.dropped[1].count += r.dropped[0].count
		// append copies the runs left to a new array once this one's
		// end is reached: the memory stays within twice the bound.
		r.dropped = r.dropped[1:]
	}
	r.dropped = append(r.dropped, dropRun{at: at, count: 1})
}

// at returns the i-th sample held, oldest first.
func (r *ring) at(i int) *rolloutapi.Sample { return &r.samples[(r.first+i)%len(r.samples)] }

// last is when the newest sample was reported.
func (r *ring) last() int64 {
	if len(r.samples) == 0 {
		return 0
	}
	return r.at(len(r.samples) - 1).At
}

// since returns the newest samples at or after since, at most limit, and
// the count of those left out past limit.
func (r *ring) since(since int64, limit int) ([]rolloutapi.Sample, int) {
	n := len(r.samples)
	// Samples are in At order: find the first at or after since.
	i := sort.Search(n, func(j int) bool { return r.at(j).At >= since })
	left := max(n-i-limit, 0)
	i += left
	out := make([]rolloutapi.Sample, 0, n-i)
	for ; i < n; i++ {
		out = append(out, *r.at(i))
	}
	return out, left
}

func (r *ring) droppedSince(since int64) int64 {
	var n int64
	for i := len(r.dropped) - 1; i >= 0 && r.dropped[i].at >= since; i-- {
		n += r.dropped[i].count
	}
	return n
}
