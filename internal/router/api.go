package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	httppprof "net/http/pprof"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kv-hint-operator/internal/hints"
)

// MaxBookingBytes caps a booking request body: room for tens of thousands
// of block hashes, far more than a prompt has.
const MaxBookingBytes = 1 << 20

// maxWorkerBytes caps a worker registration body.
const maxWorkerBytes = 64 << 10

// Response headers of POST /v1/bookings.
const (
	// HeaderOutcome is the booking's Outcome: hinted, no_actions,
	// not_hint_capable or unknown_worker.
	HeaderOutcome = "Kvhint-Outcome"
	// HeaderQueued is "true" when delivery took the hint, "false" when its
	// worker's queue was full or it has no endpoint.
	HeaderQueued = "Kvhint-Queued"
	// HeaderConfigHash is the hash of the config the booking ran on.
	HeaderConfigHash = "Kvhint-Config-Hash"
)

// bookingRequest is the JSON body of POST /v1/bookings. Counts are
// pointers so that a missing field is told apart from a zero.
type bookingRequest struct {
	RequestID       string       `json:"request_id"`
	Role            string       `json:"role"`
	Worker          string       `json:"worker"`
	PromptTokens    *int         `json:"prompt_tokens"`
	BlockSize       *int         `json:"block_size"`
	Session         *sessionJSON `json:"session"`
	CommittedKVCopy *kvCopyJSON  `json:"committed_kv_copy"`
}

type sessionJSON struct {
	ID    string `json:"id"`
	Turn  int    `json:"turn"`
	Final bool   `json:"final"`
}

type kvCopyJSON struct {
	SourceWorker   string `json:"source_worker"`
	SourceEndpoint string `json:"source_endpoint"`
	// BlockHashes decode straight into uint64 (encoding/json parses the
	// literal as an unsigned integer), so no hash goes through a float64.
	BlockHashes []uint64 `json:"block_hashes"`
}

// booking checks the request and converts it.
func (r *bookingRequest) booking() (*Booking, error) {
	var missing []string
	if r.RequestID == "" {
		missing = append(missing, "request_id")
	}
	if r.Role == "" {
		missing = append(missing, "role")
	}
	if r.Worker == "" {
		missing = append(missing, "worker")
	}
	if r.PromptTokens == nil {
		missing = append(missing, "prompt_tokens")
	}
	if r.BlockSize == nil {
		missing = append(missing, "block_size")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing required field(s): %s", ErrInvalidBooking, strings.Join(missing, ", "))
	}
	b := &Booking{RequestID: r.RequestID, Role: r.Role, Worker: r.Worker, PromptTokens: *r.PromptTokens, BlockSize: *r.BlockSize}
	if s := r.Session; s != nil {
		if s.ID == "" {
			return nil, fmt.Errorf("%w: session.id is required when session is given", ErrInvalidBooking)
		}
		b.Session = hints.Session{ID: s.ID, Turn: s.Turn, Final: s.Final}
	}
	if c := r.CommittedKVCopy; c != nil {
		if len(c.BlockHashes) == 0 {
			return nil, fmt.Errorf("%w: committed_kv_copy.block_hashes is empty; omit committed_kv_copy when nothing is copied", ErrInvalidBooking)
		}
		b.KVCopy = &hints.CommittedCopy{SourceWorker: c.SourceWorker, SourceEndpoint: c.SourceEndpoint, BlockHashes: c.BlockHashes}
	}
	return b, nil
}

// API serves the booking and worker endpoints (the loopback listener) and
// the operational ones (metrics, health).
type API struct {
	Dispatcher *Dispatcher
	Workers    *Registry
	Metrics    *Metrics
	Log        logr.Logger
	// Ready, when set, must also hold for /readyz (the pod informer has
	// synced, say); the dispatcher must always have a config.
	Ready func() error
}

// BookingHandler serves:
//
//	POST   /v1/bookings       a booking; 200 with the hint, or 204 with no message
//	GET    /v1/workers        the registered workers
//	GET    /v1/workers/{id}   one worker
//	PUT    /v1/workers/{id}   register a worker (standalone mode)
//	DELETE /v1/workers/{id}   remove a worker
//	GET    /v1/config         the hints YAML in force, hash in Kvhint-Config-Hash
func (a *API) BookingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/bookings", a.book)
	mux.HandleFunc("GET /v1/workers", a.listWorkers)
	mux.HandleFunc("GET /v1/workers/{id}", a.getWorker)
	mux.HandleFunc("PUT /v1/workers/{id}", a.putWorker)
	mux.HandleFunc("DELETE /v1/workers/{id}", a.deleteWorker)
	mux.HandleFunc("GET /v1/config", a.config)
	return mux
}

// OpsHandler serves /metrics, /healthz and /readyz, and with pprof the
// profiles of net/http/pprof under /debug/pprof/.
func (a *API) OpsHandler(pprof bool) http.Handler {
	mux := http.NewServeMux()
	if pprof {
		mux.HandleFunc("/debug/pprof/", httppprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Metrics.Registry, promhttp.HandlerOpts{Registry: a.Metrics.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", a.readyz)
	return mux
}

func (a *API) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.Dispatcher.Ready() {
		http.Error(w, "not ready: "+ErrNotReady.Error(), http.StatusServiceUnavailable)
		return
	}
	if a.Ready != nil {
		if err := a.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintf(w, "ok: config %s\n", a.Dispatcher.ConfigHash())
}

func (a *API) book(w http.ResponseWriter, r *http.Request) {
	var req bookingRequest
	if status, err := decodeJSON(w, r, MaxBookingBytes, &req); err != nil {
		a.Metrics.errInvalid.Inc()
		writeError(w, status, err)
		return
	}
	b, err := req.booking()
	if err != nil {
		a.Metrics.errInvalid.Inc()
		writeError(w, http.StatusBadRequest, err)
		return
	}
	h, err := a.Dispatcher.Book(r.Context(), b)
	switch {
	case errors.Is(err, ErrNotReady):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err)
		return
	case errors.Is(err, ErrUnknownRole):
		writeError(w, http.StatusUnprocessableEntity, err)
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err)
		return
	}
	hdr := w.Header()
	hdr.Set(HeaderOutcome, h.Outcome.String())
	hdr.Set(HeaderConfigHash, h.ConfigHash)
	if h.Outcome != OutcomeHinted {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	hdr.Set(HeaderQueued, strconv.FormatBool(h.Queued))
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", strconv.Itoa(len(h.Message)))
	w.Write(h.Message)
}

func (a *API) listWorkers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"workers": a.Workers.List()})
}

func (a *API) getWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	wk, ok := a.Workers.Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("worker %q is not registered", id))
		return
	}
	writeJSON(w, http.StatusOK, wk)
}

func (a *API) putWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var spec WorkerSpec
	if status, err := decodeJSON(w, r, maxWorkerBytes, &spec); err != nil {
		writeError(w, status, err)
		return
	}
	if spec.ID != "" && spec.ID != id {
		writeError(w, http.StatusBadRequest, fmt.Errorf("body id %q differs from the path's %q", spec.ID, id))
		return
	}
	spec.ID = id
	if err := a.Workers.Set(SourceAPI, spec); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	a.Log.Info("Registered worker", "worker", id, "endpoint", spec.HintEndpoint, "hintCapable", spec.HintCapable())
	wk, _ := a.Workers.Get(id)
	writeJSON(w, http.StatusOK, wk)
}

func (a *API) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !a.Workers.Delete(id) {
		writeError(w, http.StatusNotFound, fmt.Errorf("worker %q is not registered", id))
		return
	}
	a.Log.Info("Removed worker", "worker", id)
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) config(w http.ResponseWriter, _ *http.Request) {
	doc, hash := a.Dispatcher.Config()
	if doc == nil {
		writeError(w, http.StatusServiceUnavailable, ErrNotReady)
		return
	}
	w.Header().Set(HeaderConfigHash, hash)
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(doc)
}

// decodeJSON reads one JSON object strictly: bounded size, no unknown
// fields (a misspelt field would otherwise be silently zero), nothing after
// it. The error says what is wrong in the body's terms; the status is 413
// for a body over the limit and 400 otherwise.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, dst any) (int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("body is over the %d-byte limit", limit)
		}
		return http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return http.StatusBadRequest, describeBodyError(err)
	}
	if dec.More() {
		return http.StatusBadRequest, errors.New("body has data after the JSON object")
	}
	return 0, nil
}

func describeBodyError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Errorf("body is a JSON %s; send a JSON object", te.Value)
		}
		return fmt.Errorf("%s: got %s, want %s", te.Field, te.Value, jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("body is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.Is(err, io.EOF):
		return errors.New("body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("body is not valid JSON: it ends early")
	}
	return fmt.Errorf("body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names a Go type the way the API documentation does.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint64:
		return "an unsigned 64-bit integer"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	}
	return t.String()
}

// errorBody is the JSON of every 4xx and 5xx answer.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, errorBody{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
