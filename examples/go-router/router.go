package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Worker is one engine the router forwards requests to.
type Worker struct {
	// ID is the worker ID bookings name (its pod name in Kubernetes).
	ID string
	// URL is where requests go, e.g. http://10.0.0.5:8000.
	URL string
	// RouterHint is set when the worker advertises router_hint.
	RouterHint bool
}

// Router books a worker for every request, round-robin, and forwards the
// request to it with the booking's hint carried in-band. It stands for a
// real router's booking logic: the point is what happens after a worker is
// booked.
type Router struct {
	role     string
	workers  []Worker
	dispatch *dispatch.Dispatcher
	client   *http.Client
	next     atomic.Uint64
	// messages is memory the bookings write their hints into: a hint is
	// done with once it is carried (CarryHint copies it into the body).
	messages sync.Pool

	// HintPath is where the forwarded request carries the hint; the zero
	// value is kv_transfer_params.kv_hint, where Dynamo's vLLM handler
	// reads it.
	HintPath dispatch.InBandPath
}

// maxBodyBytes caps a request body; prompts of a million tokens fit.
const maxBodyBytes = 8 << 20

// NewRouter returns a router for one role over workers, running the hints
// config doc.
func NewRouter(role string, workers []Worker, d *dispatch.Dispatcher) *Router {
	return &Router{role: role, workers: workers, dispatch: d, client: &http.Client{Timeout: 60 * time.Second}}
}

// Capabilities is the router's worker list as the dispatcher sees it.
func Capabilities(workers []Worker) dispatch.StaticWorkers {
	m := dispatch.StaticWorkers{}
	for _, w := range workers {
		m[w.ID] = w.RouterHint
	}
	return m
}

// completion is the part of an OpenAI-style request body the router reads.
// Every other field is forwarded byte for byte.
type completion struct {
	Prompt string `json:"prompt"`
}

func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	var req completion
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "request body: "+err.Error(), http.StatusBadRequest)
		return
	}

	// Book: the router's own choice. A KV-aware router would also commit
	// a KV copy here (dispatch.Booking.KVCopy) when a peer holds the prefix.
	worker := rt.workers[rt.next.Add(1)%uint64(len(rt.workers))]
	booking := &dispatch.Booking{
		RequestID:    requestID(r),
		Role:         rt.role,
		Worker:       worker.ID,
		PromptTokens: len(req.Prompt) / 4, // a stand-in for the tokenizer
		BlockSize:    16,
		Session:      session(r),
		KVCopy:       committedCopy(r),
	}
	mem, _ := rt.messages.Get().(*[]byte)
	if mem == nil {
		mem = new([]byte)
	}
	defer rt.messages.Put(mem)
	hint, err := rt.dispatch.BuildInto(r.Context(), booking, *mem)
	if err != nil {
		// A booking the hints config cannot run (an unknown role, say)
		// still goes to its worker, without a hint: hints never decide
		// whether a request is served.
		hint = dispatch.Hint{}
	}
	if hint.Message != nil {
		// The message goes where the worker's engine reads it; every
		// other field of the caller's body is forwarded as it came,
		// kv_transfer_params of a prefill/decode handshake included.
		if body, err = dispatch.CarryHint(body, hint.Message, rt.HintPath); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		*mem = hint.Message[:0] // the next booking's, grown if it had to be
	}
	rt.forward(r.Context(), w, worker, r.URL.Path, body)
}

func (rt *Router) forward(ctx context.Context, w http.ResponseWriter, worker Worker, path string, body []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, worker.URL+path, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := rt.client.Do(req)
	if err != nil {
		http.Error(w, "worker "+worker.ID+": "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set("X-Worker", worker.ID)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// requestID takes the caller's X-Request-Id, or makes one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id
	}
	return "req-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// session reads the session headers a chat front end sets.
func session(r *http.Request) hints.Session {
	s := hints.Session{ID: r.Header.Get("X-Session-Id")}
	if s.ID == "" {
		return s
	}
	s.Turn, _ = strconv.Atoi(r.Header.Get("X-Session-Turn"))
	if s.Turn < 1 {
		// Turns count from 1, and the dispatcher refuses a session's turn
		// 0: a front end that does not count them sends every request as
		// a first turn.
		s.Turn = 1
	}
	s.Final = r.Header.Get("X-Session-Final") == "true"
	return s
}

// committedCopy stands for the KV-aware selection's decision: here a
// header names the source worker, its endpoint and the block hashes, so
// that the example can show a kv.fetch end to end.
func committedCopy(r *http.Request) *hints.CommittedCopy {
	raw := r.Header.Get("X-KV-Copy")
	if raw == "" {
		return nil
	}
	var c struct {
		Source   string   `json:"source_worker"`
		Endpoint string   `json:"source_endpoint"`
		Hashes   []uint64 `json:"block_hashes"`
	}
	if json.Unmarshal([]byte(raw), &c) != nil {
		return nil
	}
	return &hints.CommittedCopy{SourceWorker: c.Source, SourceEndpoint: c.Endpoint, BlockHashes: c.Hashes}
}
