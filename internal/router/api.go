package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	httppprof "net/http/pprof"
	"strconv"
	"sync/atomic"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxBookingBytes is the default cap on a booking request body
// (--max-booking-bytes): room for about 49,000 random 64-bit block hashes,
// a 1M-token prompt at block size 32 being 32,768. The dispatcher's
// payload cap follows the same limit, so a booking the API accepts always
// gets its kv.fetch whole.
const MaxBookingBytes = core.DefaultMaxBookingBytes

// MaxBookingBytesFlag is the flag that sets the booking limit, named in the
// 413 answer.
const MaxBookingBytesFlag = "--max-booking-bytes"

// maxWorkerBytes caps a worker registration body.
const maxWorkerBytes = 64 << 10

// Response headers of POST /v1/bookings.
const (
	// HeaderOutcome is the booking's Outcome: hinted, no_actions,
	// not_hint_capable, unknown_worker or not_in_pool.
	HeaderOutcome = "Kvhint-Outcome"
	// HeaderQueued is "true" when delivery took the hint, "false" when its
	// worker's queue was full or it has no endpoint.
	HeaderQueued = "Kvhint-Queued"
	// HeaderConfigHash is the hash of the config the booking ran on.
	HeaderConfigHash = "Kvhint-Config-Hash"
	// HeaderCopyDropped says why the booking's committed copy was dropped
	// (unknown_source, unknown_source_rank); absent when it was not.
	HeaderCopyDropped = "Kvhint-Copy-Dropped"
)

// API serves the booking and worker endpoints (the loopback listener) and
// the operational ones (metrics, health).
type API struct {
	Dispatcher *core.Dispatcher
	Workers    *Registry
	Metrics    *Metrics
	Log        logr.Logger
	// Ready, when set, must also hold for /readyz (the pod informer has
	// synced, say); the dispatcher must always have a config.
	Ready func() error
	// MaxBookingBytes caps a booking body; 0 means MaxBookingBytes. It
	// should be the dispatcher's own limit.
	MaxBookingBytes int

	// lastHash is the Kvhint-Config-Hash value of the last booking.
	lastHash atomic.Pointer[[]string]
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

// OpsHandler serves /metrics, /healthz and /readyz.
func (a *API) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Metrics.Registry, promhttp.HandlerOpts{Registry: a.Metrics.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", a.readyz)
	return mux
}

// PprofHandler serves the profiles of net/http/pprof under /debug/pprof/,
// for a listener of their own on loopback: a heap profile shows what the
// process holds.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	return mux
}

func (a *API) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.Dispatcher.Ready() {
		http.Error(w, "not ready: "+core.ErrNotReady.Error(), http.StatusServiceUnavailable)
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
	limit := int64(a.MaxBookingBytes)
	if limit <= 0 {
		limit = MaxBookingBytes
	}
	var req bookingRequest
	if status, err := decodeBooking(w, r, limit, &req); err != nil {
		if status == http.StatusRequestEntityTooLarge {
			a.Dispatcher.RecordTooLargeBooking()
		} else {
			a.Dispatcher.RecordInvalidBooking()
		}
		writeError(w, status, err)
		return
	}
	b, err := req.booking()
	if err != nil {
		a.Dispatcher.RecordInvalidBooking()
		writeError(w, http.StatusBadRequest, err)
		return
	}
	h, err := a.Dispatcher.Book(r.Context(), b)
	switch {
	case errors.Is(err, core.ErrNotReady):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err)
		return
	case errors.Is(err, core.ErrUnknownRole):
		writeError(w, http.StatusUnprocessableEntity, err)
		return
	case errors.Is(err, core.ErrBookingTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err)
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err)
		return
	}
	// The header values are shared, read-only slices: net/http only reads
	// them, and building them per answer would cost an allocation each.
	hdr := w.Header()
	hdr[HeaderOutcome] = outcomeValues(h.Outcome)
	hdr[HeaderConfigHash] = a.hashValue(h.ConfigHash)
	if h.CopyDrop != core.CopyKept {
		hdr[HeaderCopyDropped] = copyDropValues[h.CopyDrop]
	}
	if h.Outcome != core.OutcomeHinted {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if h.Queued {
		hdr[HeaderQueued] = valuesTrue
	} else {
		hdr[HeaderQueued] = valuesFalse
	}
	hdr["Content-Type"] = valuesJSON
	hdr["Content-Length"] = []string{strconv.Itoa(len(h.Message))}
	w.Write(h.Message)
}

// Shared header values of booking answers.
var (
	valuesTrue    = []string{"true"}
	valuesFalse   = []string{"false"}
	valuesJSON    = []string{"application/json"}
	valuesOutcome = func() (v [core.OutcomeNotInPool + 1][]string) {
		for o := range v {
			v[o] = []string{core.Outcome(o).String()}
		}
		return v
	}()
	copyDropValues = map[core.CopyDrop][]string{
		core.CopyDropUnknownSource:     {core.CopyDropUnknownSource.String()},
		core.CopyDropUnknownSourceRank: {core.CopyDropUnknownSourceRank.String()},
	}
)

func outcomeValues(o core.Outcome) []string {
	if o >= 0 && int(o) < len(valuesOutcome) {
		return valuesOutcome[o]
	}
	return []string{o.String()}
}

// hashValue returns the header value of a config hash, the same slice for
// as long as the hash stays the same.
func (a *API) hashValue(hash string) []string {
	if v := a.lastHash.Load(); v != nil && (*v)[0] == hash {
		return *v
	}
	v := []string{hash}
	a.lastHash.Store(&v)
	return v
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
		writeError(w, http.StatusServiceUnavailable, core.ErrNotReady)
		return
	}
	w.Header().Set(HeaderConfigHash, hash)
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(doc)
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
