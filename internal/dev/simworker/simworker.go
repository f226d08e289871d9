// Package simworker is a simulated inference worker for tests and the dev
// environment. It serves engine-style completion requests and takes the
// hint a router carries on them, in-band, as engines do; it also takes
// hints pushed to its own hint endpoint, for the sidecar's opt-in push. It
// checks every hint against the wire format an engine accepts (docs/design.md, 8a)
// and records it, the in-band and the pushed ones apart, so that a test or
// a person can read exactly what arrived and how. It keeps a simulated
// prefix cache (an LRU of KV block hashes, keyed by the prompt's text and
// filled by the kv.fetch actions of the hints it takes) and answers, as
// engines do, how many prompt tokens it served from it.
package simworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// HintPath is where the worker takes pushed hints.
const HintPath = "/v1/hints"

// Completion routes: the engine-style requests the worker serves, each
// possibly carrying a hint in-band.
const (
	CompletionsPath     = "/v1/completions"
	ChatCompletionsPath = "/v1/chat/completions"
)

// maxHintBytes caps one hint body, as an engine would.
const maxHintBytes = 4 << 20

// maxRequestBytes caps one completion request: a long prompt and its hint.
const maxRequestBytes = 16 << 20

// Message is a hint as the wire format defines it.
type Message struct {
	ProtocolVersion string   `json:"protocol_version"`
	MessageID       string   `json:"message_id"`
	Actions         []Action `json:"actions"`
}

// Action is one action of a Message.
type Action struct {
	ActionID      string          `json:"action_id"`
	ActionType    string          `json:"action_type"`
	ActionVersion string          `json:"action_version"`
	Payload       json.RawMessage `json:"payload"`
}

// Received is one hint the worker accepted.
type Received struct {
	// At is when it arrived.
	At time.Time `json:"received_at"`
	// MessageID is the message's message_id.
	MessageID string `json:"message_id"`
	// Body is the message exactly as posted, or as carried on the request.
	Body json.RawMessage `json:"body"`
	// Path is where on the request an in-band hint was carried
	// ("kv_transfer_params.kv_hint", say); empty for a pushed one.
	Path string `json:"path,omitempty"`
}

// Options configure a Worker.
type Options struct {
	// ID is the worker ID routers book.
	ID string
	// WorkerType is its router_hint_worker_type: aggregated, prefill or decode.
	WorkerType string
	// MaxRecorded bounds the hints kept; the oldest go first. 0 means 10000.
	MaxRecorded int
	// Sink makes the worker a throughput sink: it reads each hint and
	// answers, counting it as accepted, but neither checks nor records it.
	// For load runs only, where the worker's own parsing would compete with
	// the sidecar for the CPU; Hints and InBandHints are then always empty.
	// A sink has no prefix cache and answers at once.
	Sink bool
	// CacheBlocks is the capacity of the worker's simulated prefix cache,
	// in KV blocks; 0 means DefaultCacheBlocks, negative no cache.
	CacheBlocks int
	// BlockSize is the tokens per KV block the cache keys prompts by
	// (BlockHashes); 0 means DefaultBlockSize.
	BlockSize int
	// TTFTPerToken is the simulated prefill time of an uncached prompt
	// token, TTFTMax the most a completion waits for it; 0 means
	// DefaultTTFTPerToken and DefaultTTFTMax, negative no wait.
	TTFTPerToken, TTFTMax time.Duration
}

// hintLog is a ring of at most a worker's MaxRecorded hints, the oldest at
// first, count of them, and the counts of the hints accepted (recorded or
// not) and refused. The worker's mutex guards it.
type hintLog struct {
	received []Received
	first    int
	count    int
	accepted int64
	rejected int
	// results counts the actions' results (ResultApplied, ...); a
	// rejected hint counts once as ResultRejected.
	results map[string]int64
}

// add keeps h, dropping the oldest past max.
func (l *hintLog) add(h Received, max int) {
	l.accepted++
	if l.received == nil {
		l.received = make([]Received, 0, min(max, 1024))
	}
	switch {
	case l.count < len(l.received):
		// A reset left room in the ring.
		l.received[(l.first+l.count)%len(l.received)] = h
		l.count++
	case len(l.received) < max:
		// The ring is full but may still grow; first is 0 while it grows.
		l.received = append(l.received, h)
		l.count++
	default:
		l.received[l.first] = h
		l.first = (l.first + 1) % len(l.received)
	}
}

func (l *hintLog) list() []Received {
	out := make([]Received, 0, l.count)
	for i := range l.count {
		out = append(out, l.received[(l.first+i)%len(l.received)])
	}
	return out
}

func (l *hintLog) reset() {
	clear(l.received)
	clear(l.results)
	l.first, l.count, l.accepted, l.rejected = 0, 0, 0, 0
}

// Worker is a simulated worker. Its zero value is not usable; use New.
type Worker struct {
	opts Options

	mu sync.Mutex
	// pushed are the hints posted to HintPath; inBand those carried on
	// completion requests.
	pushed, inBand hintLog
	// requests counts the completion requests answered.
	requests int64
	status   int
	delay    time.Duration
	// arrived, when a waiter made it, is closed on the next accepted hint
	// of either kind.
	arrived chan struct{}
	// seen are the message IDs of the hints taken, for ResultDuplicate,
	// at most maxSeen of them (cleared whole when full).
	seen map[string]bool
	// cache is the simulated prefix cache; nil for a sink or without one.
	cache *prefixCache
	// promptTokens and cachedTokens count the completions' prompt tokens
	// and those served from the cache.
	promptTokens, cachedTokens int64
}

// maxSeen bounds the message IDs a worker remembers.
const maxSeen = 1 << 16

// New returns a worker that answers a pushed hint with 200 and the
// results of its actions (Results); a sink answers 204.
func New(o Options) *Worker {
	if o.MaxRecorded <= 0 {
		o.MaxRecorded = 10000
	}
	if o.BlockSize <= 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.TTFTPerToken == 0 {
		o.TTFTPerToken = DefaultTTFTPerToken
	}
	if o.TTFTMax == 0 {
		o.TTFTMax = DefaultTTFTMax
	}
	if o.Sink {
		// A sink reads hints without checking them: it has no results to
		// give, and no cache.
		o.TTFTPerToken = -1
		return &Worker{opts: o, status: http.StatusNoContent}
	}
	w := &Worker{opts: o, status: http.StatusOK}
	switch {
	case o.CacheBlocks == 0:
		w.cache = newPrefixCache(DefaultCacheBlocks)
	case o.CacheBlocks > 0:
		w.cache = newPrefixCache(o.CacheBlocks)
	}
	return w
}

// take records an accepted message in l and returns its results: each
// action's, or duplicate for all when its message_id was taken before.
func (w *Worker) take(l *hintLog, m *Message, h Received) Results {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil || len(w.seen) >= maxSeen {
		w.seen = map[string]bool{}
	}
	dup := w.seen[m.MessageID]
	w.seen[m.MessageID] = true
	r := resultsOf(m, dup)
	if !dup && w.cache != nil {
		// The transfer a kv.fetch asks for brings the copy's blocks in
		// (ResultApplied: on arrival).
		w.cache.insert(fetchedBlocks(m))
	}
	if l.results == nil {
		l.results = map[string]int64{}
	}
	r.count(l.results)
	l.add(h, w.opts.MaxRecorded)
	w.wakeLocked()
	return r
}

// reject counts a hint that breaks the wire format in l.
func (w *Worker) reject(l *hintLog) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l.rejected++
	if l.results == nil {
		l.results = map[string]int64{}
	}
	l.results[ResultRejected]++
}

// ID is the worker's ID.
func (w *Worker) ID() string { return w.opts.ID }

// SetBehaviour makes the worker answer pushed hints with status after
// delay: a 5xx or a delay past the sender's timeout simulates a sick
// worker. The hint is checked and recorded before the delay, whatever the
// answer. Completion requests are not affected.
func (w *Worker) SetBehaviour(status int, delay time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status, w.delay = status, delay
}

// Handler serves:
//
//	POST   /v1/completions       a completion request, with or without a
//	POST   /v1/chat/completions  hint in-band (400 if the hint breaks the
//	                             wire format); answers a small completion
//	                             whose usage counts the prompt's tokens
//	                             served from the prefix cache, after a
//	                             time to first token that grows with the
//	                             others
//	POST   /v1/hints             take a pushed hint: 200 and the results
//	                             of its actions (Results: applied,
//	                             deferred, duplicate, unsupported), or 400
//	                             and rejected if it breaks the wire format
//	GET    /hints                the pushed hints received, oldest first,
//	                             as JSON, with the counts accepted (recorded
//	                             or not) and rejected; under "in_band" the
//	                             same for the hints carried on requests, and
//	                             under "requests" the requests answered,
//	                             "prompt_tokens" and "cached_tokens" their
//	                             tokens and those served from the cache,
//	                             "cache_blocks" the blocks it holds
//	DELETE /hints                forget them all and reset the counts (the
//	                             cache keeps its blocks)
//	GET    /healthz              liveness, with the worker's ID
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+HintPath, w.takeHint)
	mux.HandleFunc("POST "+CompletionsPath, w.complete)
	mux.HandleFunc("POST "+ChatCompletionsPath, w.complete)
	mux.HandleFunc("GET /hints", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		w.mu.Lock()
		st := Status{Worker: w.opts.ID, Sink: w.opts.Sink, Requests: w.requests,
			Hints: w.pushed.list(), Accepted: w.pushed.accepted, Rejected: w.pushed.rejected, Results: maps.Clone(w.pushed.results),
			InBand:       HintCounts{Hints: w.inBand.list(), Accepted: w.inBand.accepted, Rejected: w.inBand.rejected, Results: maps.Clone(w.inBand.results)},
			PromptTokens: w.promptTokens, CachedTokens: w.cachedTokens}
		if w.cache != nil {
			st.CacheBlocks = w.cache.lru.Len()
		}
		w.mu.Unlock()
		json.NewEncoder(rw).Encode(st)
	})
	mux.HandleFunc("DELETE /hints", func(rw http.ResponseWriter, _ *http.Request) {
		w.Reset()
		rw.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(rw, "ok: worker %s\n", w.opts.ID)
	})
	return mux
}

// Status is what GET /hints answers.
type Status struct {
	Worker string `json:"worker"`
	// Hints, Accepted and Rejected are the pushed hints.
	Hints    []Received `json:"hints"`
	Accepted int64      `json:"accepted"`
	Rejected int        `json:"rejected"`
	// Results counts the pushed actions by result, in vLLM's vocabulary
	// (applied, deferred, duplicate, rejected, unsupported).
	Results map[string]int64 `json:"results,omitempty"`
	// InBand are the hints carried on completion requests.
	InBand HintCounts `json:"in_band"`
	// Requests counts the completion requests answered.
	Requests int64 `json:"requests"`
	// PromptTokens and CachedTokens count their prompt tokens and those
	// served from the prefix cache; CacheBlocks is the blocks it holds.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	CacheBlocks  int   `json:"cache_blocks"`
	Sink         bool  `json:"sink"`
}

// HintCounts are the hints of one kind a worker took.
type HintCounts struct {
	Hints    []Received `json:"hints"`
	Accepted int64      `json:"accepted"`
	Rejected int        `json:"rejected"`
	// Results counts the actions by result, as Status.Results.
	Results map[string]int64 `json:"results,omitempty"`
}

func (w *Worker) takeHint(rw http.ResponseWriter, r *http.Request) {
	if w.opts.Sink {
		w.sinkHint(rw, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxHintBytes))
	var m *Message
	if err == nil {
		m, err = CheckMessage(body)
	}
	if err != nil {
		w.reject(&w.pushed)
		writeResults(rw, http.StatusBadRequest, rejected(err))
		return
	}
	res := w.take(&w.pushed, m, Received{At: time.Now(), MessageID: m.MessageID, Body: body})
	w.answer(rw, r, &res)
}

// sinkBufs holds the read buffers of a sink worker.
var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// sinkHint reads a hint to its end, within the same limit, and counts it.
func (w *Worker) sinkHint(rw http.ResponseWriter, r *http.Request) {
	bp := sinkBufs.Get().(*[]byte)
	body := http.MaxBytesReader(rw, r.Body, maxHintBytes)
	var err error
	for err == nil {
		_, err = body.Read(*bp)
	}
	sinkBufs.Put(bp)
	if err != io.EOF {
		w.mu.Lock()
		w.pushed.rejected++
		w.mu.Unlock()
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.pushed.accepted++
	w.wakeLocked()
	w.mu.Unlock()
	w.answer(rw, r, nil)
}

func (w *Worker) wakeLocked() {
	if w.arrived != nil {
		close(w.arrived)
		w.arrived = nil
	}
}

// answer answers an accepted hint as SetBehaviour says: with its results
// when the status is 200 and there are results to give.
func (w *Worker) answer(rw http.ResponseWriter, r *http.Request, res *Results) {
	w.mu.Lock()
	status, delay := w.status, w.delay
	w.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if status == http.StatusOK && res != nil {
		writeResults(rw, status, *res)
		return
	}
	rw.WriteHeader(status)
}

// CheckMessage checks a hint the way an engine that accepts router hints
// does: envelope fields present, protocol 0.1, actions numbered a1, a2, ...
// in order, at most 32, each with a type, a version and an object payload,
// and a kv.fetch with a non-empty list of unsigned 64-bit block hashes.
func CheckMessage(body []byte) (*Message, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var m Message
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("hint is not a valid message: %w", err)
	}
	if dec.More() {
		return nil, errors.New("hint has data after the message")
	}
	switch {
	case m.ProtocolVersion != "0.1":
		return nil, fmt.Errorf("protocol_version %q, want 0.1", m.ProtocolVersion)
	case m.MessageID == "":
		return nil, errors.New("message_id is empty")
	case len(m.Actions) == 0:
		return nil, errors.New("a hint must carry at least one action")
	case len(m.Actions) > 32:
		return nil, fmt.Errorf("%d actions, over the 32 allowed", len(m.Actions))
	}
	for i, a := range m.Actions {
		if want := fmt.Sprintf("a%d", i+1); a.ActionID != want {
			return nil, fmt.Errorf("action %d has id %q, want %q", i+1, a.ActionID, want)
		}
		if a.ActionType == "" || a.ActionVersion == "" {
			return nil, fmt.Errorf("action %s: action_type and action_version are required", a.ActionID)
		}
		p := bytes.TrimSpace(a.Payload)
		if len(p) == 0 || p[0] != '{' {
			return nil, fmt.Errorf("action %s: payload must be a JSON object", a.ActionID)
		}
		if a.ActionType == "kv.fetch" {
			if err := checkFetch(p); err != nil {
				return nil, fmt.Errorf("action %s: kv.fetch: %w", a.ActionID, err)
			}
		}
	}
	return &m, nil
}

func checkFetch(payload []byte) error {
	var f struct {
		BlockHashes           []uint64 `json:"block_hashes"`
		SourceControlEndpoint *string  `json:"source_control_endpoint"`
	}
	if err := json.Unmarshal(payload, &f); err != nil {
		return err
	}
	if len(f.BlockHashes) == 0 {
		return errors.New("block_hashes must be a non-empty list")
	}
	if f.SourceControlEndpoint != nil && *f.SourceControlEndpoint == "" {
		return errors.New("source_control_endpoint, when present, must not be empty")
	}
	return nil
}

// Hints returns the pushed hints received, oldest first.
func (w *Worker) Hints() []Received {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pushed.list()
}

// Accepted counts the pushed hints accepted since the last Reset,
// including those no longer recorded (past MaxRecorded) and, for a sink,
// those never recorded.
func (w *Worker) Accepted() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pushed.accepted
}

// Rejected counts the pushed hints refused as malformed.
func (w *Worker) Rejected() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pushed.rejected
}

// InBandHints returns the hints received in-band, on completion requests,
// oldest first.
func (w *Worker) InBandHints() []Received {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inBand.list()
}

// InBandAccepted counts the in-band hints accepted since the last Reset,
// recorded or not.
func (w *Worker) InBandAccepted() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inBand.accepted
}

// InBandRejected counts the completion requests refused for a malformed
// in-band hint.
func (w *Worker) InBandRejected() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inBand.rejected
}

// Requests counts the completion requests answered since the last Reset,
// with a hint or without.
func (w *Worker) Requests() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests
}

// Reset forgets the hints received and resets the counts; the prefix
// cache keeps its blocks (ResetCache empties it).
func (w *Worker) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pushed.reset()
	w.inBand.reset()
	w.requests, w.promptTokens, w.cachedTokens = 0, 0, 0
	w.seen = nil
}

// ResetCache empties the prefix cache.
func (w *Worker) ResetCache() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cache != nil {
		w.cache.reset()
	}
}

// CachedTokens counts the completions' prompt tokens served from the
// prefix cache since the last Reset.
func (w *Worker) CachedTokens() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cachedTokens
}

// WaitForHints waits until at least n pushed hints have been accepted
// since the last Reset, or ctx is done, and returns those recorded (none
// for a sink).
func (w *Worker) WaitForHints(ctx context.Context, n int) ([]Received, error) {
	return w.waitFor(ctx, &w.pushed, "pushed", n)
}

// WaitForInBandHints is WaitForHints for the hints carried in-band.
func (w *Worker) WaitForInBandHints(ctx context.Context, n int) ([]Received, error) {
	return w.waitFor(ctx, &w.inBand, "in-band", n)
}

func (w *Worker) waitFor(ctx context.Context, l *hintLog, kind string, n int) ([]Received, error) {
	for {
		w.mu.Lock()
		got := int(l.accepted)
		if got >= n {
			hs := l.list()
			w.mu.Unlock()
			return hs, nil
		}
		if w.arrived == nil {
			w.arrived = make(chan struct{})
		}
		arrived := w.arrived
		w.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			w.mu.Lock()
			hs := l.list()
			w.mu.Unlock()
			return hs, fmt.Errorf("worker %s: %d of %d %s hints arrived: %w", w.opts.ID, got, n, kind, ctx.Err())
		}
	}
}

// Server is a Worker listening on a real socket.
type Server struct {
	*Worker
	ln   net.Listener
	srv  *http.Server
	sink *sinkServer // instead of srv, for a sink worker
	// URL is the worker's base URL, e.g. http://127.0.0.1:41234.
	URL string
}

// Start serves w on addr ("127.0.0.1:0" picks a free port). A sink worker
// is served by fasthttp (see sinkServer), any other by net/http.
func Start(w *Worker, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{Worker: w, ln: ln, URL: "http://" + ln.Addr().String()}
	if w.opts.Sink {
		s.sink = startSink(w, ln)
		return s, nil
	}
	s.srv = &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// HintEndpoint is the URL to register as the worker's hint endpoint, for
// a sidecar that pushes hints to it.
func (s *Server) HintEndpoint() string { return s.URL + HintPath }

// Close stops the server at once, dropping open connections: what a worker
// that dies looks like to the sidecar.
func (s *Server) Close() error {
	if s.sink != nil {
		return s.sink.close()
	}
	return s.srv.Close()
}

// Shutdown stops the server gracefully.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.sink != nil {
		return s.sink.shutdown(ctx)
	}
	return s.srv.Shutdown(ctx)
}

// Register registers the worker with a standalone sidecar's API (PUT
// /v1/workers/{id}) as a router_hint worker with the given hint endpoint.
func Register(ctx context.Context, sidecarURL, id, endpoint, workerType string) error {
	body, err := json.Marshal(map[string]any{
		"capabilities":  []string{"router_hint"},
		"hint_endpoint": endpoint,
		"worker_type":   workerType,
	})
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(sidecarURL, "/") + "/v1/workers/" + id
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("registering worker %s with %s: %w", id, sidecarURL, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("registering worker %s with %s: %s: %s", id, sidecarURL, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
