// Package simworker is a simulated inference worker for tests and the dev
// environment: it advertises router_hint, checks every hint it receives
// against the wire format an engine accepts (DESIGN 8a) and records it, so
// that a test or a person can read exactly what arrived.
package simworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// HintPath is where the worker takes hints.
const HintPath = "/v1/hints"

// maxHintBytes caps one hint body, as an engine would.
const maxHintBytes = 4 << 20

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
	// Body is the message exactly as posted.
	Body json.RawMessage `json:"body"`
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
	// the sidecar for the CPU; Hints is then always empty.
	Sink bool
}

// Worker is a simulated worker. Its zero value is not usable; use New.
type Worker struct {
	opts Options

	mu sync.Mutex
	// received is a ring of at most MaxRecorded hints: the oldest is at
	// first, and there are count of them.
	received []Received
	first    int
	count    int
	accepted int64 // every hint accepted, recorded or not
	rejected int
	status   int
	delay    time.Duration
	// arrived, when a waiter made it, is closed on the next accepted hint.
	arrived chan struct{}
}

// New returns a worker that accepts hints with 204 No Content.
func New(o Options) *Worker {
	if o.MaxRecorded <= 0 {
		o.MaxRecorded = 10000
	}
	return &Worker{opts: o, status: http.StatusNoContent}
}

// ID is the worker's ID.
func (w *Worker) ID() string { return w.opts.ID }

// SetBehaviour makes the worker answer hints with status after delay: a
// 5xx or a delay past the sender's timeout simulates a sick worker. The
// hint is checked and recorded before the delay, whatever the answer.
func (w *Worker) SetBehaviour(status int, delay time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status, w.delay = status, delay
}

// Handler serves:
//
//	POST   /v1/hints  take a hint (400 if it breaks the wire format)
//	GET    /hints     the hints received, oldest first, as JSON, with the
//	                  counts accepted (recorded or not) and rejected
//	DELETE /hints     forget them and reset the counts
//	GET    /healthz   liveness, with the worker's ID
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+HintPath, w.takeHint)
	mux.HandleFunc("GET /hints", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		w.mu.Lock()
		accepted, rejected := w.accepted, w.rejected
		w.mu.Unlock()
		json.NewEncoder(rw).Encode(map[string]any{"worker": w.opts.ID, "hints": w.Hints(), "accepted": accepted, "rejected": rejected, "sink": w.opts.Sink})
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
		w.mu.Lock()
		w.rejected++
		w.mu.Unlock()
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.record(Received{At: time.Now(), MessageID: m.MessageID, Body: body})
	w.answer(rw, r)
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
		w.rejected++
		w.mu.Unlock()
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.accepted++
	w.wakeLocked()
	w.mu.Unlock()
	w.answer(rw, r)
}

// record keeps an accepted hint, dropping the oldest past MaxRecorded, and
// wakes the waiters.
func (w *Worker) record(h Received) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.accepted++
	if w.received == nil {
		w.received = make([]Received, 0, min(w.opts.MaxRecorded, 1024))
	}
	switch {
	case w.count < len(w.received):
		// A Reset left room in the ring.
		w.received[(w.first+w.count)%len(w.received)] = h
		w.count++
	case len(w.received) < w.opts.MaxRecorded:
		// The ring is full but may still grow; first is 0 while it grows.
		w.received = append(w.received, h)
		w.count++
	default:
		w.received[w.first] = h
		w.first = (w.first + 1) % len(w.received)
	}
	w.wakeLocked()
}

func (w *Worker) wakeLocked() {
	if w.arrived != nil {
		close(w.arrived)
		w.arrived = nil
	}
}

// answer answers an accepted hint as SetBehaviour says.
func (w *Worker) answer(rw http.ResponseWriter, r *http.Request) {
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

// Hints returns the hints received, oldest first.
func (w *Worker) Hints() []Received {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hintsLocked()
}

func (w *Worker) hintsLocked() []Received {
	out := make([]Received, 0, w.count)
	for i := range w.count {
		out = append(out, w.received[(w.first+i)%len(w.received)])
	}
	return out
}

// Accepted counts the hints accepted since the last Reset, including those
// no longer recorded (past MaxRecorded) and, for a sink, those never
// recorded.
func (w *Worker) Accepted() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.accepted
}

// Rejected counts the posts refused as malformed.
func (w *Worker) Rejected() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rejected
}

// Reset forgets the hints received and resets the counts.
func (w *Worker) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.received)
	w.first, w.count, w.accepted, w.rejected = 0, 0, 0, 0
}

// WaitForHints waits until at least n hints have been accepted since the
// last Reset, or ctx is done, and returns those recorded (none for a sink).
func (w *Worker) WaitForHints(ctx context.Context, n int) ([]Received, error) {
	for {
		w.mu.Lock()
		got := int(w.accepted)
		if got >= n {
			hs := w.hintsLocked()
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
			return w.Hints(), fmt.Errorf("worker %s: %d of %d hints arrived: %w", w.opts.ID, got, n, ctx.Err())
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

// HintEndpoint is the URL to register as the worker's hint endpoint.
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
