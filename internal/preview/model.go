package preview

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Config is one side of a preview: a compiled policy file and the router
// modes of its roles, as `kvhint compile -f` produces them.
type Config struct {
	// Name says where it came from (a file, a router), for messages.
	Name  string
	Doc   []byte
	Modes hintsconfig.Modes
	Hash  string
	// Form is Doc's policy-file form; empty reads it from the file.
	Form hintsconfig.Form
}

// RoleStats are what one role's bookings did under one config.
type RoleStats struct {
	Bookings int `json:"bookings"`
	// Hinted counts the bookings that got a hint message.
	Hinted int `json:"hinted"`
	// WithAction counts, per action type, the bookings that carried one.
	WithAction map[string]int `json:"with_action"`
	// CopiesCommitted counts the bookings the selection committed a KV
	// copy for; CopiesDropped those whose copy the dispatcher dropped (the
	// source advertises no endpoint).
	CopiesCommitted int `json:"copies_committed"`
	CopiesDropped   int `json:"copies_dropped"`
	// CopiesFrom counts the committed copies by their source's role.
	CopiesFrom map[string]int `json:"copies_from,omitempty"`
	// FetchedBlocks are the blocks kv.fetch asked for; FetchedUsed those
	// a prompt then read from the cache; FetchedWasted the rest (not on
	// the source, already cached, or evicted or left unread).
	FetchedBlocks int `json:"fetched_blocks"`
	FetchedUsed   int `json:"fetched_used"`
	FetchedWasted int `json:"fetched_wasted"`
	// PromptBlocks and CachedBlocks give the block-weighted prefix hit
	// ratio: cached blocks over prompt blocks, summed over bookings.
	PromptBlocks int `json:"prompt_blocks"`
	CachedBlocks int `json:"cached_blocks"`
	// PrefillTokens are the prompt tokens computed (not served from the
	// cache).
	PrefillTokens int64 `json:"prefill_tokens"`
	// RetainedBlocks counts the retentions of blocks by kv.retain; each
	// ends either read while retained (RetainedReused) or not
	// (RetainedExpiredUnused: expired, evicted, retained again, or still
	// retained when the trace ends), so the two add up to RetainedBlocks.
	RetainedBlocks        int `json:"retained_blocks"`
	RetainedReused        int `json:"retained_reused"`
	RetainedExpiredUnused int `json:"retained_expired_unused"`
	// EvictedBlocks were freed by kv.evict; EvictedAskedAgain were later
	// in a prompt on the same worker.
	EvictedBlocks     int `json:"evicted_blocks"`
	EvictedAskedAgain int `json:"evicted_asked_again"`
	// EvictKeptInUse are the blocks kv.evict named that stayed because
	// another active request on the worker read them (--evict-in-use
	// keep).
	EvictKeptInUse int `json:"evict_kept_in_use"`
	// TTFT estimates, milliseconds.
	TTFTMeanMS float64 `json:"ttft_mean_ms"`
	TTFTP50MS  float64 `json:"ttft_p50_ms"`
	TTFTP90MS  float64 `json:"ttft_p90_ms"`
	TTFTP99MS  float64 `json:"ttft_p99_ms"`

	ttft []float64
}

// HitRatio is CachedBlocks over PromptBlocks; 0 with no prompt block.
func (s *RoleStats) HitRatio() float64 {
	if s.PromptBlocks == 0 {
		return 0
	}
	return float64(s.CachedBlocks) / float64(s.PromptBlocks)
}

// BookingActions is what one booking got: its actions, each written as
// ActionString does, in order.
type BookingActions struct {
	RequestID string   `json:"request_id"`
	Role      string   `json:"role"`
	Worker    string   `json:"worker"`
	Actions   []string `json:"actions"`
	// CachedBlocks and TTFTMS are what the booking got: its prefix blocks
	// served from the cache and its TTFT estimate.
	CachedBlocks int     `json:"cached_blocks"`
	TTFTMS       float64 `json:"ttft_ms"`
}

// Result is a config's replay.
type Result struct {
	Roles    map[string]*RoleStats
	Bookings []BookingActions
	// Headline is the role whose TTFT a user sees: prefill, else
	// aggregated, else decode, else the first role by name.
	Headline string
	// Windows are the figures of the bookings that arrived in each of
	// Assumptions.Windows equal spans of the trace's time.
	Windows []WindowStats
	// EndToEnd is, for a disaggregated router (prefill and decode roles)
	// replaying rows booked for every role, each request's TTFT from
	// arrival to its first token: the prefill booking's TTFT, then the
	// decode booking's (its kv.fetch, or its recompute of what it lacks),
	// then one output token. It is then the headline TTFT.
	EndToEnd *TTFTStats `json:"end_to_end,omitempty"`
}

// TTFTStats are TTFT estimates, milliseconds.
type TTFTStats struct {
	Requests int     `json:"requests"`
	MeanMS   float64 `json:"mean_ms"`
	P50MS    float64 `json:"p50_ms"`
	P90MS    float64 `json:"p90_ms"`
	P99MS    float64 `json:"p99_ms"`
}

func ttftStats(v []float64) *TTFTStats {
	if len(v) == 0 {
		return nil
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	slices.Sort(v)
	n := len(v) - 1
	return &TTFTStats{Requests: len(v), MeanMS: sum / float64(len(v)), P50MS: v[n*50/100], P90MS: v[n*90/100], P99MS: v[n*99/100]}
}

// WindowStats are one time window's figures: the prefix hits of every
// role's bookings, and the TTFT of the headline role's.
type WindowStats struct {
	PromptBlocks int     `json:"prompt_blocks"`
	CachedBlocks int     `json:"cached_blocks"`
	TTFTSumMS    float64 `json:"ttft_sum_ms"`
	TTFTCount    int     `json:"ttft_count"`
}

// headlineRole picks Result.Headline from role names.
func headlineRole(names []string) string {
	for _, want := range []string{"prefill", "aggregated", "decode"} {
		if slices.Contains(names, want) {
			return want
		}
	}
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

// worker is one simulated worker.
type worker struct {
	name     string
	role     string
	idx      int
	cache    *blockCache
	capable  bool
	endpoint string
	// busyUntil is when its prefill queue empties (ms).
	busyUntil float64
	// queuedTokens are prompt tokens still to compute; active requests
	// and their blocks are those not yet complete.
	queuedTokens int
	activeReqs   int
	activeBlocks int
	// freed are the blocks kv.evict freed on it, until asked for again.
	freed map[uint64]bool
}

func (w *worker) HintCapable() bool                 { return w.capable }
func (w *worker) InPool(role string) bool           { return w.role == role }
func (w *worker) Deliver([]byte, time.Time) bool    { return false }
func (w *worker) SourceEndpoint(int) (string, bool) { return w.endpoint, w.endpoint != "" }
func (r registry) Lookup(id string) dispatch.Worker {
	if w, ok := r[id]; ok {
		return w
	}
	return nil
}

type registry map[string]*worker

// roleState is one role's workers and its worker-selection model.
type roleState struct {
	name    string
	mode    hintsconfig.RouterMode
	sel     string
	params  selParams
	workers []*worker
	stats   *RoleStats
	rr      int
	rng     *rand.Rand
}

// selParams are the parameters of the cost-function selections, with
// Dynamo's defaults filled in.
type selParams struct {
	OverlapScoreCredit        float64 `json:"overlap_score_credit"`
	OverlapScoreCreditDecay   float64 `json:"overlap_score_credit_decay"`
	PrefillLoadScale          float64 `json:"prefill_load_scale"`
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight"`
	SharedCacheMultiplier     float64 `json:"shared_cache_multiplier"`
	RouterTemperature         float64 `json:"router_temperature"`
	Seed                      *uint64 `json:"seed"`
	CacheThreshold            float64 `json:"cache_threshold"`
}

type event struct {
	at     float64
	seq    int
	w      *worker
	done   bool // completion (else the end of its prefill)
	tokens int
	blocks int
	hashes []uint64
	// reading are the cached blocks the request reads until it
	// completes (refcounted caches).
	reading []*block
	ttl     float64 // kv.retain's, ms; 0 none
	evict   bool
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sim replays a trace under one config.
type sim struct {
	a        Assumptions
	d        *dispatch.Dispatcher
	roles    map[string]*roleState
	order    []*roleState // the roles a Mooncake row is booked for, in order
	reg      registry
	owners   map[string]*worker // source endpoint -> worker
	events   eventHeap
	seq      int
	sessions map[string][]uint64
	nextID   uint64
	res      *Result
	names    []string // the roles, sorted; set once every role is known
	// lastReq and lastHashes are each session's last request without
	// hash ids and the ids it was given.
	lastReq    map[string]string
	lastHashes map[string][]uint64
	// readUntil is, under EvictOracle, each trace block's last reading
	// row's arrival (ms).
	readUntil map[uint64]float64
	// r is the engine blocks a trace block (hash id) holds: the trace's
	// block size over the engine's.
	r int
	// disagg is set for a router with prefill and decode roles; lastTTFT
	// is the TTFT of the last booking.
	disagg   bool
	lastTTFT float64
	// winStart and winWidth place a row in Result.Windows.
	winStart, winWidth float64
}

// window is the index of the window at falls in.
func (s *sim) window(at float64) int {
	k := len(s.res.Windows)
	if s.winWidth <= 0 {
		return 0
	}
	return min(k-1, max(0, int((at-s.winStart)/s.winWidth)))
}

// synthetic hash ids for rows that carry none start here, far above the
// ids traces use.
const syntheticBase = 1 << 62

// Replay runs rows through cfg: the real dispatcher, built from cat, and
// the model of workers and caches that a described.
func Replay(cat *hints.Catalog, cfg Config, rows []Row, a Assumptions) (*Result, error) {
	if cfg.Doc == nil {
		return nil, fmt.Errorf("%s: no policy file (no role is accepted)", cfg.Name)
	}
	parsed, err := hintsconfig.ParseConfig(cfg.Doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	g, probs := hintsconfig.Compile(cat, parsed, cfg.Modes)
	if probs.HasErrors() {
		return nil, fmt.Errorf("%s: %w", cfg.Name, probs.Errors())
	}
	s := &sim{a: a, roles: map[string]*roleState{}, reg: registry{}, owners: map[string]*worker{},
		sessions: map[string][]uint64{}, lastReq: map[string]string{}, lastHashes: map[string][]uint64{}, nextID: syntheticBase, res: &Result{Roles: map[string]*RoleStats{}}}
	s.r = 1
	if a.EngineBlockSize > 0 {
		s.r = a.BlockSize / a.EngineBlockSize
	}
	s.d = dispatch.NewDispatcher(dispatch.Options{Catalog: cat, Workers: s.reg,
		PolicyDeadline: time.Hour, Isolation: dispatch.IsolationOptions{HardDeadline: time.Hour}})
	if err := s.d.LoadConfig(dispatch.Config{Doc: cfg.Doc, Modes: cfg.Modes, Hash: cfg.Hash, Form: cfg.Form}, cfg.Name); err != nil {
		return nil, err
	}
	for i, r := range g.Roles {
		rs := &roleState{name: r.Name, mode: r.Mode, sel: r.Selection.Type, stats: &RoleStats{WithAction: map[string]int{}}}
		rs.params = selParams{OverlapScoreCredit: 1, PrefillLoadScale: 1, CacheThreshold: 0.5}
		if r.Selection.Type == builtin.TypeKVCR {
			rs.params.SharedCacheMultiplier = 0.5
		}
		if len(r.Selection.Params) > 0 {
			if err := json.Unmarshal(r.Selection.Params, &rs.params); err != nil {
				return nil, fmt.Errorf("%s: role %s: %s parameters: %w", cfg.Name, r.Name, r.Selection.Type, err)
			}
		}
		if r.Selection.Type == builtin.TypeDefaultCostFn {
			rs.params.SharedCacheMultiplier = 0 // the model has no shared cache tier
		}
		seed := a.Seed
		if rs.params.Seed != nil {
			seed = *rs.params.Seed
		}
		rs.rng = rand.New(rand.NewPCG(seed, uint64(i)+1))
		s.roles[r.Name] = rs
		s.res.Roles[r.Name] = rs.stats
		if r.Name != "encode" {
			s.order = append(s.order, rs)
		}
	}
	// Mooncake rows go to prefill, then decode, then aggregated.
	rank := map[string]int{"prefill": 0, "decode": 1, "aggregated": 2}
	slices.SortStableFunc(s.order, func(x, y *roleState) int { return rank[x.name] - rank[y.name] })
	if a.EvictInUse == EvictOracle {
		s.readUntil = map[uint64]float64{}
		for i := range rows {
			for _, h := range rows[i].Hashes {
				s.readUntil[h] = rows[i].At
			}
		}
	}
	if err := s.addWorkers(rows); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	s.res.Headline = headlineRole(s.roleNames())
	if k := a.Windows; k > 0 && len(rows) > 0 {
		s.res.Windows = make([]WindowStats, k)
		s.winStart = rows[0].At
		s.winWidth = (rows[len(rows)-1].At - rows[0].At) / float64(k)
	}
	ctx := context.Background()
	s.disagg = s.roles["prefill"] != nil && s.roles["decode"] != nil
	var e2e []float64
	for i := range rows {
		row := &rows[i]
		s.drain(row.At)
		hashes := s.hashesOf(row)
		if row.Role != "" {
			rs := s.roles[row.Role]
			if rs == nil {
				return nil, fmt.Errorf("%s: trace line %d: role %q is not in the config (roles %s)", cfg.Name, row.Line, row.Role, strings.Join(s.roleNames(), ", "))
			}
			if err := s.book(ctx, rs, row, hashes); err != nil {
				return nil, fmt.Errorf("%s: trace line %d: %w", cfg.Name, row.Line, err)
			}
			continue
		}
		first := 0.0
		for _, rs := range s.order {
			if err := s.book(ctx, rs, row, hashes); err != nil {
				return nil, fmt.Errorf("%s: trace line %d: %w", cfg.Name, row.Line, err)
			}
			if rs.name == "prefill" || rs.name == "decode" {
				first += s.lastTTFT
			}
		}
		if s.disagg {
			first += a.DecodeMSPerToken
			e2e = append(e2e, first)
			if len(s.res.Windows) > 0 {
				win := &s.res.Windows[s.window(row.At)]
				win.TTFTSumMS += first
				win.TTFTCount++
			}
		}
	}
	s.res.EndToEnd = ttftStats(e2e)
	s.drain(math.Inf(1))
	for _, rs := range s.roles {
		for _, w := range rs.workers {
			w.cache.finish()
		}
		finishTTFT(rs.stats)
	}
	return s.res, nil
}

func (s *sim) roleNames() []string {
	if s.names != nil {
		return s.names
	}
	var out []string
	for n := range s.roles {
		out = append(out, n)
	}
	slices.Sort(out)
	s.names = out
	return out
}

// addWorkers builds each role's workers: the topology's, or, when the
// model replays a recorded trace's choices, the workers the trace names.
func (s *sim) addWorkers(rows []Row) error {
	for _, name := range s.roleNames() {
		rs := s.roles[name]
		t := s.a.Topology.For(name)
		if s.a.RecordedChoices {
			continue
		}
		for i := 0; i < t.Workers; i++ {
			s.addWorker(rs, fmt.Sprintf("%s-%d", name, i), t)
		}
	}
	if !s.a.RecordedChoices {
		return nil
	}
	for i := range rows {
		r := &rows[i]
		if r.Role == "" || r.Worker == "" {
			return fmt.Errorf("trace line %d: --choices recorded needs every row's role and worker", r.Line)
		}
		rs := s.roles[r.Role]
		if rs == nil {
			return fmt.Errorf("trace line %d: role %q is not in the config (roles %s)", r.Line, r.Role, strings.Join(s.roleNames(), ", "))
		}
		if _, ok := s.reg[r.Worker]; !ok {
			s.addWorker(rs, r.Worker, s.a.Topology.For(r.Role))
		}
		if c := r.Copy; c != nil && c.SourceWorker != "" {
			if _, ok := s.reg[c.SourceWorker]; !ok {
				// A source outside the trace's bookings: a worker of the
				// role's peers, known only as a source.
				s.addWorker(rs, c.SourceWorker, s.a.Topology.For(r.Role))
			}
		}
	}
	return nil
}

func (s *sim) addWorker(rs *roleState, name string, t RoleTopology) {
	// The cache holds whole trace blocks: runs of r engine blocks.
	w := &worker{name: name, role: rs.name, idx: len(rs.workers), cache: newBlockCache(t.CacheBlocks/s.r, rs.stats),
		capable: t.hintCapable(), freed: map[uint64]bool{}}
	w.cache.refcounted = s.a.EvictInUse != EvictFree
	w.cache.readUntil = s.readUntil
	if t.sourceEndpoints() {
		w.endpoint = "model://" + name
		s.owners[w.endpoint] = w
	}
	rs.workers = append(rs.workers, w)
	s.reg[name] = w
}

// drain applies every event due by now, in time order.
func (s *sim) drain(now float64) {
	for len(s.events) > 0 && s.events[0].at <= now {
		e := heap.Pop(&s.events).(event)
		w := e.w
		if !e.done {
			w.queuedTokens -= e.tokens
			continue
		}
		w.activeReqs--
		w.activeBlocks -= e.blocks
		w.cache.release(e.reading)
		w.cache.expire(e.at)
		if e.ttl > 0 {
			w.cache.stats.RetainedBlocks += w.cache.retain(e.hashes, e.at, e.ttl)
		}
		if e.evict {
			freed, kept := w.cache.evict(e.hashes, e.at)
			for _, h := range freed {
				w.freed[h] = true
			}
			w.cache.stats.EvictedBlocks += len(freed)
			w.cache.stats.EvictKeptInUse += kept
		}
	}
}

// hashesOf returns the row's block ids. A row without hash_ids (a
// recorded booking carries none) continues its session's previous prompt
// (its whole blocks) and takes new ids for the rest; outside a session
// every block is new.
func (s *sim) hashesOf(row *Row) []uint64 {
	bs := s.blockSize(row)
	if row.Hashes != nil {
		if row.Session != "" {
			s.sessions[row.Session] = row.Hashes[:row.InputTokens/bs]
		}
		return row.Hashes
	}
	if row.Session != "" && s.lastReq[row.Session] == row.RequestID {
		return s.lastHashes[row.Session] // another role's booking of the same request
	}
	n := blocksOf(row.InputTokens, bs)
	out := make([]uint64, 0, n)
	if row.Session != "" {
		prev := s.sessions[row.Session]
		out = append(out, prev[:min(len(prev), n)]...)
	}
	for len(out) < n {
		out = append(out, s.nextID)
		s.nextID++
	}
	if row.Session != "" {
		whole := row.InputTokens / bs
		s.sessions[row.Session] = out[:whole]
		s.lastReq[row.Session], s.lastHashes[row.Session] = row.RequestID, out
	}
	return out
}

func (s *sim) blockSize(row *Row) int {
	if row.BlockSize > 0 {
		return row.BlockSize
	}
	return s.a.BlockSize
}

// ratio is the engine blocks each of row's trace blocks holds: 1 for a
// recorded row, whose blocks are the engine's.
func (s *sim) ratio(row *Row) int {
	if row.BlockSize > 0 {
		return 1
	}
	return s.r
}

// engineBlockSize is the block size row's booking carries.
func (s *sim) engineBlockSize(row *Row) int {
	return s.blockSize(row) / s.ratio(row)
}

// engineCopy writes a committed copy of trace blocks, the first at index
// from of the prompt, in engine blocks: each trace id h becomes the run
// h*r .. h*r+r-1, the prompt's partial last block only the engine blocks
// its tokens fill.
func (s *sim) engineCopy(c *hints.CommittedCopy, from int, row *Row, hashes []uint64) {
	r := s.ratio(row)
	if c == nil || r == 1 {
		return
	}
	bs, ebs := s.blockSize(row), s.engineBlockSize(row)
	out := make([]uint64, 0, len(c.BlockHashes)*r)
	for i, h := range c.BlockHashes {
		n := r
		if idx := from + i; idx == len(hashes)-1 {
			n = min(r, max(1, blocksOf(row.InputTokens-idx*bs, ebs)))
		}
		for j := range n {
			out = append(out, h*uint64(r)+uint64(j))
		}
	}
	c.BlockHashes = out
}

// book runs one booking of row for role rs: the worker choice, the
// dispatcher, the actions' effect on the caches and the timing.
func (s *sim) book(ctx context.Context, rs *roleState, row *Row, hashes []uint64) error {
	now := row.At
	st := rs.stats
	var w *worker
	var kvCopy *hints.CommittedCopy
	if s.a.RecordedChoices {
		// Only the recorded worker's cache changes: expiry is lazy, and
		// the others' retentions end when they are next read, in the
		// same order, so a booking costs the same whatever the workers.
		w = s.reg[row.Worker]
		w.cache.expire(now)
		if c := row.Copy; c != nil {
			kvCopy = &hints.CommittedCopy{SourceWorker: c.SourceWorker, SourceEndpoint: c.SourceEndpoint, SourceRank: c.SourceRank, BlockHashes: c.BlockHashes}
			if src := s.reg[c.SourceWorker]; src != nil && c.SourceEndpoint != "" {
				s.owners[c.SourceEndpoint] = src
			}
		}
	} else {
		// The choice reads every worker's cache.
		for _, w := range rs.workers {
			w.cache.expire(now)
		}
		var err error
		if w, kvCopy, err = s.choose(rs, row, hashes); err != nil {
			return err
		}
		if kvCopy != nil {
			s.engineCopy(kvCopy, w.cache.peek(hashes), row, hashes)
		}
	}
	bs := s.blockSize(row)
	r := s.ratio(row)
	b := dispatch.Booking{RequestID: row.RequestID, Role: rs.name, Worker: w.name, PromptTokens: row.InputTokens, BlockSize: bs / r, KVCopy: kvCopy}
	if row.Session != "" {
		b.Session = hints.Session{ID: row.Session, Turn: row.Turn, Final: row.Final}
	}
	h, err := s.d.Build(ctx, &b)
	if err != nil {
		return err
	}
	st.Bookings++
	if kvCopy != nil {
		st.CopiesCommitted++
		if src := s.reg[kvCopy.SourceWorker]; src != nil {
			if st.CopiesFrom == nil {
				st.CopiesFrom = map[string]int{}
			}
			st.CopiesFrom[src.role]++
		}
		if h.CopyDrop != dispatch.CopyKept {
			st.CopiesDropped++
		}
	}
	acts, err := decodeActions(h.Message)
	if err != nil {
		return err
	}
	ba := BookingActions{RequestID: row.RequestID, Role: rs.name, Worker: w.name, Actions: make([]string, 0, len(acts))}
	var ttl float64
	evict := false
	fetchedIn := 0
	seen := map[string]bool{}
	for _, a := range acts {
		ba.Actions = append(ba.Actions, a.String())
		if !seen[a.Type] {
			seen[a.Type] = true
			st.WithAction[a.Type]++
		}
		switch a.Type {
		case hints.ActionKVFetch:
			src := s.owners[a.Source]
			for k, eh := range a.Hashes {
				// Engine blocks back to the trace blocks they run in.
				hh := eh / uint64(r)
				if k > 0 && a.Hashes[k-1]/uint64(r) == hh {
					continue
				}
				st.FetchedBlocks++
				switch {
				case w.cache.has(hh), src == nil, !src.cache.has(hh):
					st.FetchedWasted++
				case w.cache.insert(hh, true):
					fetchedIn++
				default:
					st.FetchedWasted++
				}
			}
		case hints.ActionKVRetain:
			ttl = a.TTLSeconds * 1000
		case hints.ActionKVEvict:
			evict = true
		}
	}
	if h.Outcome == dispatch.OutcomeHinted {
		st.Hinted++
	}

	for _, hh := range hashes {
		if w.freed[hh] {
			delete(w.freed, hh)
			st.EvictedAskedAgain++
		}
	}
	cached := w.cache.prefix(hashes)
	computed := max(0, row.InputTokens-cached*bs)
	for _, hh := range hashes[cached:] {
		w.cache.insert(hh, false)
	}
	st.PromptBlocks += len(hashes)
	st.CachedBlocks += cached
	st.PrefillTokens += int64(computed)
	var win *WindowStats
	if len(s.res.Windows) > 0 {
		win = &s.res.Windows[s.window(now)]
		win.PromptBlocks += len(hashes)
		win.CachedBlocks += cached
	}

	start := max(now, w.busyUntil)
	end := start + float64(computed)*s.a.PrefillMSPerToken + float64(fetchedIn)*s.a.FetchMSPerBlock
	w.busyUntil = end
	st.ttft = append(st.ttft, end-now)
	ba.CachedBlocks, ba.TTFTMS = cached, end-now
	s.res.Bookings = append(s.res.Bookings, ba)
	s.lastTTFT = end - now
	if win != nil && rs.name == s.res.Headline && (!s.disagg || row.Role != "") {
		win.TTFTSumMS += end - now
		win.TTFTCount++
	}
	if computed > 0 {
		w.queuedTokens += computed
		s.push(event{at: end, w: w, tokens: computed})
	}
	done := end
	if rs.name != "prefill" {
		done += float64(row.OutputTokens) * s.a.DecodeMSPerToken
	}
	blocks := len(hashes) + (row.OutputTokens+bs-1)/bs
	w.activeReqs++
	w.activeBlocks += blocks
	s.push(event{at: done, w: w, done: true, blocks: blocks, hashes: hashes, reading: w.cache.acquire(hashes), ttl: ttl, evict: evict})
	return nil
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

func finishTTFT(st *RoleStats) {
	if len(st.ttft) == 0 {
		return
	}
	sum := 0.0
	for _, v := range st.ttft {
		sum += v
	}
	st.TTFTMeanMS = sum / float64(len(st.ttft))
	slices.Sort(st.ttft)
	st.TTFTP50MS = st.ttft[(len(st.ttft)-1)*50/100]
	st.TTFTP90MS = st.ttft[(len(st.ttft)-1)*90/100]
	st.TTFTP99MS = st.ttft[(len(st.ttft)-1)*99/100]
	st.ttft = nil
}

// action is one action of a hint message, as far as the model reads it.
type action struct {
	Type       string
	Version    string
	Hashes     []uint64
	Source     string
	TTLSeconds float64
	Priority   int
	Payload    json.RawMessage
}

// String writes the action for the report: a kv.fetch by its block count
// and source, kv.retain by its TTL and priority, others by their payload.
func (a action) String() string {
	switch a.Type {
	case hints.ActionKVFetch:
		return fmt.Sprintf("kv.fetch(%d blocks from %s)", len(a.Hashes), a.Source)
	case hints.ActionKVRetain:
		return fmt.Sprintf("kv.retain(ttl %gs, priority %d)", a.TTLSeconds, a.Priority)
	case hints.ActionKVEvict:
		return "kv.evict"
	}
	return fmt.Sprintf("%s@%s%s", a.Type, a.Version, a.Payload)
}

type messageJSON struct {
	Actions []struct {
		Type    string          `json:"action_type"`
		Version string          `json:"action_version"`
		Payload json.RawMessage `json:"payload"`
	} `json:"actions"`
}

type payloadJSON struct {
	BlockHashes []uint64 `json:"block_hashes"`
	Source      string   `json:"source_control_endpoint"`
	TTLSeconds  float64  `json:"ttl_seconds"`
	Priority    int      `json:"priority"`
}

// decodeActions reads the actions of a hint message the dispatcher built.
func decodeActions(msg []byte) ([]action, error) {
	if msg == nil {
		return nil, nil
	}
	var m messageJSON
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, fmt.Errorf("reading the dispatcher's hint message: %w", err)
	}
	out := make([]action, len(m.Actions))
	for i, a := range m.Actions {
		out[i] = action{Type: a.Type, Version: a.Version, Payload: a.Payload}
		switch a.Type {
		case hints.ActionKVFetch, hints.ActionKVRetain:
			var p payloadJSON
			if err := json.Unmarshal(a.Payload, &p); err != nil {
				return nil, fmt.Errorf("reading a %s payload: %w", a.Type, err)
			}
			out[i].Hashes, out[i].Source, out[i].TTLSeconds, out[i].Priority = p.BlockHashes, p.Source, p.TTLSeconds, p.Priority
		}
	}
	return out, nil
}
