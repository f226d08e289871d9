package devenv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// FrontRouter is the small router the dev environment runs in front of
// one sample router's simulated workers, as a person's own router would
// sit in front of their engines. For every completion request it books a
// worker per role through the router's sidecar (POST /v1/bookings), puts
// the hint the booking answered on the request with dispatch.CarryHint, and
// forwards the request to the booked worker's completion route. A
// disaggregated router's request goes to its prefill worker first and
// then, with the transfer parameters the prefill worker answered, to its
// decode worker, the hint of each booking beside them. After each hop it
// reports the request's outcome to the sidecar (POST /v1/outcomes) under
// the hash of the config that booked it: the cached tokens the worker's
// usage answered, the time to its answer by the wall clock, the error of
// a hop that failed.
//
// A role that commits KV copies commits, at its copy rate, as a kvcr
// selection does, the blocks of the prompt (simworker.BlockHashes, the
// keys of the workers' caches) that the worker that served the session's
// last turn holds, when the booking moves the session elsewhere.
type FrontRouter struct {
	// Router is the sample router's name.
	Router string
	// Pod is the router pod whose sidecar it books through.
	Pod string
	// URL is the base URL it serves completion requests on.
	URL string

	roles    []frontRole
	hintPath dispatch.InBandPath
	sidecar  *bookingapi.Client
	// sidecarErr is why bookingBase names no booking API; every booking
	// fails with it.
	sidecarErr error
	workers    *http.Client
	srv        *http.Server
	nextID     atomic.Int64

	mu     sync.Mutex
	rng    *rand.Rand
	totals BookingTotals
	// served is what served each session's last turn, by role and
	// session: a later turn booked elsewhere commits its copy from there.
	// At most maxSessions, cleared whole when full.
	served map[sessionKey]servedTurn
}

// sessionKey is a session in one role.
type sessionKey struct{ role, session string }

// servedTurn is the worker that served a session's last turn and the
// blocks of that turn's prompt: their count and the last one's hash.
type servedTurn struct {
	worker *Worker
	blocks int
	last   uint64
}

// maxSessions bounds the sessions a front router remembers.
const maxSessions = 1 << 14

// frontRole is one stage of a request, with the workers it books.
type frontRole struct {
	name    string
	workers []*Worker
	// copyRate is the share of bookings that carry a committed KV copy
	// from another worker of the role, as a kvcr selection would commit.
	copyRate float64
}

// BookingTotals counts what one front router did.
type BookingTotals struct {
	// Requests counts the completion requests served, every hop answered.
	Requests int
	// Bookings counts the bookings the sidecar answered; Hints those that
	// answered a hint, with Actions in all; Copies counts the bookings
	// sent with a committed KV copy.
	Bookings, Hints, Actions, Copies int
	// Errors counts the requests that failed, at a booking or a hop.
	Errors    int
	LastError string
	// Outcomes counts the hops' outcomes the sidecar took; OutcomeErrors
	// those it did not (the last error in LastOutcomeError). A booking
	// answer without a config hash reports none.
	Outcomes, OutcomeErrors int
	LastOutcomeError        string
}

// plus returns the sum of two front routers' counts; the last errors are
// b's where b has one.
func (a BookingTotals) plus(b BookingTotals) BookingTotals {
	a.Requests += b.Requests
	a.Bookings += b.Bookings
	a.Hints += b.Hints
	a.Actions += b.Actions
	a.Copies += b.Copies
	a.Errors += b.Errors
	a.Outcomes += b.Outcomes
	a.OutcomeErrors += b.OutcomeErrors
	a.LastError = cmp.Or(b.LastError, a.LastError)
	a.LastOutcomeError = cmp.Or(b.LastOutcomeError, a.LastOutcomeError)
	return a
}

// prefillCopyRate is the share of prefill bookings, among those on a
// worker other than the one that served the session's last turn, that
// commit a copy of that turn's blocks: all of them, as a kvcr selection
// with a shared-cache multiplier above 0 commits a copy whenever it books
// a worker that lacks a prefix another worker holds.
const prefillCopyRate = 1.0

// maxCopyBlocks bounds the blocks of a committed copy.
const maxCopyBlocks = 1024

// maxOutcomeError bounds the error an outcome reports.
const maxOutcomeError = 512

// outcomeTimeout bounds reporting one outcome.
const outcomeTimeout = 2 * time.Second

// maxFrontBody caps a completion request the front router takes.
const maxFrontBody = 16 << 20

// blockSize is the tokens per KV block of every booking: the simulated
// workers' caches key prompts by blocks of it.
const blockSize = simworker.DefaultBlockSize

// requestBudget bounds one completion request from its first booking to
// its last worker's answer, every hop included: a prefill and a decode hop
// each bounded by the worker client's 30 s alone could take a minute.
const requestBudget = 40 * time.Second

// startFrontRouter serves a front router on a free loopback port.
func startFrontRouter(name string, roles []frontRole, sidecar *Sidecar, path dispatch.InBandPath) (*FrontRouter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return serveFrontRouter(ln, name, sidecar.BookingURL, roles, path), nil
}

// StandInRole is one stage of the stand-in router's requests and the
// workers it books for it.
type StandInRole struct {
	Name    string
	Workers []*Worker
}

// ServeStandInRouter serves, on ln, the router `kvhint-dev router` runs in
// a pod in front of the kvhint sidecar: the dev environment's front
// router, booking at bookingBase (the sidecar's booking API base URL,
// http://HOST:PORT or unix:///PATH) and carrying hints at path. Roles run
// in the order given, prefill before decode; a router with no roles
// answers every completion request 503 but runs, books nothing and
// serves /healthz.
func ServeStandInRouter(ln net.Listener, name, bookingBase string, roles []StandInRole, path dispatch.InBandPath) *FrontRouter {
	fr := make([]frontRole, 0, len(roles))
	for _, r := range roles {
		f := frontRole{name: r.Name, workers: r.Workers}
		if r.Name == "prefill" {
			f.copyRate = prefillCopyRate
		}
		fr = append(fr, f)
	}
	return serveFrontRouter(ln, name, bookingBase, fr, path)
}

func serveFrontRouter(ln net.Listener, name, bookingBase string, roles []frontRole, path dispatch.InBandPath) *FrontRouter {
	f := &FrontRouter{
		Router:   name,
		URL:      "http://" + ln.Addr().String(),
		roles:    roles,
		hintPath: path,
		workers:  &http.Client{Timeout: 30 * time.Second},
		rng:      rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)),
		served:   map[sessionKey]servedTurn{},
	}
	f.sidecar, f.sidecarErr = bookingapi.NewClient(bookingBase, 5*time.Second)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", f.serve)
	mux.HandleFunc("POST /v1/chat/completions", f.serve)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	// Every phase is bounded: a request's hops all run within
	// requestBudget (serve), which ends before the write timeout does, so
	// the client gets the router's error rather than a cut connection;
	// idle keep-alives are closed and headers capped.
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: requestBudget + 5*time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go f.srv.Serve(ln)
	return f
}

// Totals returns a copy of the counts.
func (f *FrontRouter) Totals() BookingTotals {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.totals
}

// Close stops serving at once.
func (f *FrontRouter) Close() error { return f.srv.Close() }

// Shutdown stops taking requests and waits, until ctx ends, for those in
// flight to be answered; then it closes what is left.
func (f *FrontRouter) Shutdown(ctx context.Context) error {
	err := f.srv.Shutdown(ctx)
	if err != nil {
		f.srv.Close()
	}
	return err
}

// frontRequest is what the front router reads of a completion request.
type frontRequest struct {
	Prompt   string `json:"prompt"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
}

// text is the prompt's text, as the simulated workers read it.
func (r *frontRequest) text() string {
	t := r.Prompt
	for _, m := range r.Messages {
		t += m.Content
	}
	return t
}

func (f *FrontRouter) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFrontBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	var req frontRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Header.Get("X-Request-Id")
	if id == "" {
		id = f.Router + "-req-" + strconv.FormatInt(f.nextID.Add(1), 10)
	}
	if len(f.roles) == 0 {
		http.Error(w, "router "+f.Router+" has no workers to book", http.StatusServiceUnavailable)
		return
	}
	ses := sessionOf(r)
	text := req.text()
	ctx, cancel := context.WithTimeout(r.Context(), requestBudget)
	defer cancel()
	var (
		answer []byte
		worker string
		// params are the transfer parameters the prefill hop answered,
		// for the decode hop.
		params json.RawMessage
	)
	for i, role := range f.roles {
		hop := body
		switch {
		case i+1 < len(f.roles):
			// A prefill hop: ask for a remote decode, as a disaggregated
			// router does.
			hop, err = withTransferParams(body, json.RawMessage(`{"do_remote_decode":true}`))
		case params != nil:
			hop, err = withTransferParams(body, params)
		}
		if err == nil {
			worker, answer, err = f.hop(ctx, id, role, ses, text, hop, r.URL.Path)
		}
		if err != nil {
			f.fail(err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		params = transferParamsOf(answer)
	}
	f.mu.Lock()
	f.totals.Requests++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Worker", worker)
	w.Write(answer)
}

// hop books a worker of role and forwards body to it with the booking's
// hint carried in-band; it returns the worker and its answer, and reports
// the outcome to the sidecar.
func (f *FrontRouter) hop(ctx context.Context, id string, role frontRole, ses hints.Session, text string, body []byte, route string) (string, []byte, error) {
	tokens := simworker.PromptTokens(text)
	hashes := simworker.BlockHashes(text, blockSize)
	worker, kvCopy := f.pick(role, ses, hashes)
	b := bookingapi.Booking{RequestID: id, Role: role.name, Worker: worker.ID, PromptTokens: tokens, BlockSize: blockSize, Session: ses, KVCopy: kvCopy}
	a, err := f.book(ctx, &b)
	if err != nil {
		return "", nil, fmt.Errorf("booking %s for %s: %w", role.name, id, err)
	}
	if a.Message != nil {
		if body, err = dispatch.CarryHint(body, a.Message, f.hintPath); err != nil {
			return "", nil, fmt.Errorf("carrying the hint for %s: %w", id, err)
		}
	}
	start := time.Now()
	ans, rejected, err := f.forward(ctx, worker, route, body)
	o := bookingapi.Outcome{RequestID: id, SessionID: ses.ID, Role: role.name, Worker: worker.ID, ConfigHash: a.ConfigHash, PromptTokens: tokens,
		HintRejected: rejected && a.Message != nil}
	if err == nil {
		// The answer is not streamed: its time is the first token's.
		o.TTFTSeconds = time.Since(start).Seconds()
		o.CachedTokens = min(cachedTokensOf(ans), tokens)
	} else {
		o.Error = truncate(err.Error(), maxOutcomeError)
	}
	f.report(ctx, &o)
	if err != nil {
		return "", nil, err
	}
	f.remember(role, ses, worker, hashes)
	return worker.ID, ans, nil
}

// forward posts body to the worker's route and returns its answer, and
// whether the worker refused the request's hint.
func (f *FrontRouter) forward(ctx context.Context, worker *Worker, route string, body []byte) ([]byte, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, worker.URL+route, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.workers.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("worker %s: %w", worker.ID, err)
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, false, fmt.Errorf("worker %s: %w", worker.ID, err)
	}
	if resp.StatusCode != http.StatusOK {
		// A simulated worker refuses a hint that breaks the wire format
		// with 400 and its results, "rejected".
		rejected := resp.StatusCode == http.StatusBadRequest && bytes.Contains(ans, []byte(`"error"`)) && bytes.Contains(ans, []byte(`"results"`))
		return nil, rejected, fmt.Errorf("worker %s: %s: %s", worker.ID, resp.Status, bytes.TrimSpace(ans))
	}
	return ans, false, nil
}

// cachedTokensOf is the usage.prompt_tokens_details.cached_tokens of an
// OpenAI answer, 0 when it has none.
func cachedTokensOf(answer []byte) int {
	var a struct {
		Usage struct {
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(answer, &a) != nil {
		return 0
	}
	return max(a.Usage.PromptTokensDetails.CachedTokens, 0)
}

// report posts a hop's outcome to the sidecar, when its booking answered
// a config hash, and counts what became of it; a failed report does not
// fail the request.
func (f *FrontRouter) report(ctx context.Context, o *bookingapi.Outcome) {
	if o.ConfigHash == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeTimeout)
	defer cancel()
	err := f.sidecar.ReportOutcome(ctx, o)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.totals.OutcomeErrors++
		f.totals.LastOutcomeError = err.Error()
		return
	}
	f.totals.Outcomes++
}

// remember notes that worker served the session's turn in role, whose
// prompt has the blocks hashes.
func (f *FrontRouter) remember(role frontRole, ses hints.Session, worker *Worker, hashes []uint64) {
	if ses.ID == "" || role.copyRate == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := sessionKey{role.name, ses.ID}
	if ses.Final {
		delete(f.served, k)
		return
	}
	if len(f.served) >= maxSessions {
		clear(f.served)
	}
	t := servedTurn{worker: worker, blocks: len(hashes)}
	if len(hashes) > 0 {
		t.last = hashes[len(hashes)-1]
	}
	f.served[k] = t
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// book asks the sidecar for the booking's hint and the hash of the config
// that booked it.
func (f *FrontRouter) book(ctx context.Context, b *bookingapi.Booking) (bookingapi.Answer, error) {
	if f.sidecarErr != nil {
		return bookingapi.Answer{}, f.sidecarErr
	}
	a, err := f.sidecar.BookAnswer(ctx, b)
	if err != nil {
		return a, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.totals.Bookings++
	if a.Message != nil {
		f.totals.Hints++
		f.totals.Actions += bytes.Count(a.Message, []byte(`"action_id"`))
	}
	return a, nil
}

// pick books a worker of role at random and, at the role's copy rate,
// commits a copy of the prompt's blocks (hashes) that the worker that
// served the session's last turn holds, when that is another worker: the
// blocks of its prompt, which the new prompt begins with.
func (f *FrontRouter) pick(role frontRole, ses hints.Session, hashes []uint64) (*Worker, *hints.CommittedCopy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := role.workers[f.rng.IntN(len(role.workers))]
	if len(role.workers) < 2 || role.copyRate == 0 || f.rng.Float64() >= role.copyRate {
		return w, nil
	}
	t, ok := f.served[sessionKey{role.name, ses.ID}]
	if !ok || t.worker == w || t.blocks == 0 || t.blocks > len(hashes) || hashes[t.blocks-1] != t.last {
		return w, nil
	}
	f.totals.Copies++
	return w, &hints.CommittedCopy{SourceWorker: t.worker.ID, SourceEndpoint: "tcp://" + t.worker.ID + ":23280",
		BlockHashes: hashes[:min(t.blocks, maxCopyBlocks)]}
}

func (f *FrontRouter) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.totals.Errors++
	f.totals.LastError = err.Error()
}

// sessionOf reads the session headers a chat front end sets.
func sessionOf(r *http.Request) hints.Session {
	id := r.Header.Get("X-Session-Id")
	if id == "" {
		return hints.Session{}
	}
	turn, _ := strconv.Atoi(r.Header.Get("X-Session-Turn"))
	if turn < 1 {
		turn = 1 // turns count from 1; a front end that counts none sends first turns
	}
	return hints.Session{ID: id, Turn: turn, Final: r.Header.Get("X-Session-Final") == "true"}
}

// withTransferParams returns body with its kv_transfer_params set to
// params. It re-encodes the body: it is the router's own change to the
// request, made before any hint is carried.
func withTransferParams(body []byte, params json.RawMessage) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	fields["kv_transfer_params"] = params
	return json.Marshal(fields)
}

// transferParamsOf is the kv_transfer_params a worker answered, or nil.
func transferParamsOf(answer []byte) json.RawMessage {
	var a struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(answer, &a) != nil || len(a.KVTransferParams) == 0 || string(a.KVTransferParams) == "null" {
		return nil
	}
	return a.KVTransferParams
}
