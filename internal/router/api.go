package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	httppprof "net/http/pprof"
	"net/url"
	pathpkg "path"
	"runtime/debug"
	"strings"
	"unsafe"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
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
}

// BookingHandler serves, on the booking listener's fasthttp server:
//
//	POST   /v1/bookings       a booking; 200 with the hint, or 204 with no message
//	GET    /v1/workers        the registered workers
//	GET    /v1/workers/{id}   one worker
//	PUT    /v1/workers/{id}   register a worker (standalone mode)
//	DELETE /v1/workers/{id}   remove a worker
//	GET    /v1/config         the hints YAML in force, hash in Kvhint-Config-Hash
//
// Paths are matched as net/http's ServeMux matches them (see route), and
// the answers to a path or method that matches nothing are its answers.
func (a *API) BookingHandler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer a.recoverPanic(ctx)
		path := ctx.URI().PathOriginal()
		if string(path) == "/v1/bookings" && string(ctx.Method()) == fasthttp.MethodPost {
			a.book(ctx)
			return
		}
		a.route(ctx, path)
	}
}

// route serves every request but a booking: the paths are matched segment
// by segment, each unescaped (a worker ID may hold an escaped slash); a
// path that is not clean is redirected to its clean form first; a known
// path with another method is a 405 that lists the allowed ones; GET
// routes answer HEAD too.
func (a *API) route(ctx *fasthttp.RequestCtx, escaped []byte) {
	path := string(escaped)
	method := string(ctx.Method())
	if path == "*" {
		// The request target of OPTIONS for the whole server.
		if method == fasthttp.MethodOptions {
			ctx.Response.Header.SetContentLength(0)
			return
		}
		ctx.SetConnectionClose()
		writeError(ctx, fasthttp.StatusBadRequest, errors.New("malformed request: * is a request target of OPTIONS only"))
		return
	}
	if clean := cleanPath(path); clean != path {
		redirect(ctx, clean)
		return
	}
	get := method == fasthttp.MethodGet || method == fasthttp.MethodHead
	segs := strings.Split(path[1:], "/")
	for i, s := range segs {
		if strings.Contains(s, "%") {
			u, err := url.PathUnescape(s)
			if err != nil {
				// net/http refuses such a request before any handler.
				ctx.SetConnectionClose()
				writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("malformed request: path: %w", err))
				return
			}
			segs[i] = u
		}
	}
	switch {
	case len(segs) < 2 || len(segs) > 3 || segs[0] != "v1":
		notFound(ctx)
	case len(segs) == 2 && segs[1] == "bookings":
		if method == fasthttp.MethodPost {
			a.book(ctx)
		} else {
			methodNotAllowed(ctx, allowPost)
		}
	case len(segs) == 2 && segs[1] == "workers":
		if get {
			a.listWorkers(ctx)
		} else {
			methodNotAllowed(ctx, allowGet)
		}
	case len(segs) == 2 && segs[1] == "config":
		if get {
			a.config(ctx)
		} else {
			methodNotAllowed(ctx, allowGet)
		}
	case len(segs) == 3 && segs[1] == "workers" && segs[2] != "":
		switch id := segs[2]; {
		case get:
			a.getWorker(ctx, id)
		case method == fasthttp.MethodPut:
			a.putWorker(ctx, id)
		case method == fasthttp.MethodDelete:
			a.deleteWorker(ctx, id)
		default:
			methodNotAllowed(ctx, allowWorker)
		}
	default:
		notFound(ctx)
	}
}

// The Allow values of 405 answers, in net/http's order.
var (
	allowPost   = []byte("POST")
	allowGet    = []byte("GET, HEAD")
	allowWorker = []byte("DELETE, GET, HEAD, PUT")
)

// cleanPath is p with . and .. elements and repeated slashes resolved, its
// trailing slash kept, as net/http's ServeMux cleans a path before it
// matches it.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := pathpkg.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			return p
		}
		np += "/"
	}
	return np
}

// redirect answers 307 to the clean form of the request's path, with its
// query, as net/http's ServeMux does.
func redirect(ctx *fasthttp.RequestCtx, clean string) {
	loc := clean
	if q := ctx.URI().QueryString(); len(q) > 0 {
		loc += "?" + string(q)
	}
	ctx.Response.Header.SetCanonical(headerLocation, []byte(loc))
	ctx.SetStatusCode(fasthttp.StatusTemporaryRedirect)
	method := string(ctx.Method())
	if method == fasthttp.MethodGet || method == fasthttp.MethodHead {
		ctx.SetContentTypeBytes(valueHTML)
	}
	if method == fasthttp.MethodGet {
		fmt.Fprintf(ctx, "<a href=\"%s\">Temporary Redirect</a>.\n\n", html.EscapeString(loc))
	}
}

// notFound and methodNotAllowed answer as net/http's ServeMux does.
func notFound(ctx *fasthttp.RequestCtx) {
	plainError(ctx, fasthttp.StatusNotFound, "404 page not found\n")
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow []byte) {
	ctx.Response.Header.SetCanonical(headerAllow, allow)
	plainError(ctx, fasthttp.StatusMethodNotAllowed, "Method Not Allowed\n")
}

func plainError(ctx *fasthttp.RequestCtx, status int, body string) {
	ctx.SetContentTypeBytes(valueText)
	ctx.Response.Header.SetCanonical(headerNosniff, valueNosniff)
	ctx.SetStatusCode(status)
	ctx.Response.SetBodyString(body)
}

// recoverPanic answers 500 and closes the connection when a handler
// panics, and logs the panic: a bug fails its request, not the sidecar
// (fasthttp, unlike net/http, recovers nothing itself).
func (a *API) recoverPanic(ctx *fasthttp.RequestCtx) {
	r := recover()
	if r == nil {
		return
	}
	a.Log.Error(fmt.Errorf("panic: %v", r), "Booking API handler panicked", "method", string(ctx.Method()),
		"path", string(ctx.URI().PathOriginal()), "stack", string(debug.Stack()))
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	writeError(ctx, fasthttp.StatusInternalServerError, errors.New("internal error; the sidecar's log has it"))
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

// bookingLimit is the booking body limit in force.
func (a *API) bookingLimit() int {
	if a.MaxBookingBytes > 0 {
		return a.MaxBookingBytes
	}
	return MaxBookingBytes
}

// requestBody is the request's body as a reader: the stream the server
// reads it from (newBookingServer streams bodies), or, for a request the
// server read whole or without a body, its bytes.
func requestBody(ctx *fasthttp.RequestCtx) io.Reader {
	if r := ctx.RequestBodyStream(); r != nil {
		return r
	}
	return bytes.NewReader(ctx.Request.Body())
}

// ExpectBody answers a request that asks "Expect: 100-continue" before it
// sends its body: 100 when the body it declares fits the limit of what it
// asks for, 413 at once (counted, for a booking) when it does not, so that
// an oversized body is never invited. The server can only send the status
// then, with no JSON error: fasthttp writes the answer itself.
func (a *API) ExpectBody(ctx *fasthttp.RequestCtx) int {
	declared := ctx.Request.Header.ContentLength()
	limit := a.bookingLimit()
	path, method := string(ctx.URI().PathOriginal()), string(ctx.Method())
	booking := method == fasthttp.MethodPost && path == "/v1/bookings"
	if method == fasthttp.MethodPut && strings.HasPrefix(path, "/v1/workers/") {
		limit = maxWorkerBytes
	}
	if declared <= limit {
		return fasthttp.StatusContinue
	}
	if booking {
		a.Dispatcher.RecordTooLargeBooking()
	}
	return fasthttp.StatusRequestEntityTooLarge
}

func (a *API) book(ctx *fasthttp.RequestCtx) {
	var req bookingRequest
	if status, err := readBooking(requestBody(ctx), ctx.Request.Header.ContentLength(), a.bookingLimit(), &req); err != nil {
		switch status {
		case fasthttp.StatusRequestEntityTooLarge:
			a.Dispatcher.RecordTooLargeBooking()
			// The rest of the body is not read: the connection cannot
			// carry another request.
			ctx.SetConnectionClose()
			lingerOnClose(ctx)
		case fasthttp.StatusRequestTimeout:
			// Too slow a client, not an invalid booking; the connection's
			// deadline has passed.
			ctx.SetConnectionClose()
		default:
			a.Dispatcher.RecordInvalidBooking()
		}
		writeError(ctx, status, err)
		return
	}
	b, err := req.booking()
	if err != nil {
		a.Dispatcher.RecordInvalidBooking()
		writeError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	// Not ctx: a RequestCtx is done when the server begins to shut down,
	// which would cut short the bookings the shutdown grace lets finish
	// (a policy may watch its context), and it is reused once the handler
	// returns. net/http's request context was not cancelled by a shutdown
	// either. A policy's time is bounded by the dispatcher's deadline.
	h, err := a.Dispatcher.Book(context.Background(), b)
	switch {
	case errors.Is(err, core.ErrNotReady):
		ctx.Response.Header.SetCanonical(headerRetryAfter, valueOne)
		writeError(ctx, fasthttp.StatusServiceUnavailable, err)
		return
	case errors.Is(err, core.ErrUnknownRole):
		writeError(ctx, fasthttp.StatusUnprocessableEntity, err)
		return
	case errors.Is(err, core.ErrBookingTooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, err)
		return
	case err != nil:
		writeError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	// The header names and values are shared, read-only slices the
	// response header copies into its own reused buffers: building them
	// per answer would cost allocations.
	hdr := &ctx.Response.Header
	hdr.SetCanonical(headerOutcome, outcomeValue(h.Outcome))
	hdr.SetCanonical(headerConfigHash, bytesOf(h.ConfigHash))
	if h.CopyDrop != core.CopyKept {
		hdr.SetCanonical(headerCopyDropped, copyDropValue(h.CopyDrop))
	}
	if h.Outcome != core.OutcomeHinted {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if h.Queued {
		hdr.SetCanonical(headerQueued, valueTrue)
	} else {
		hdr.SetCanonical(headerQueued, valueFalse)
	}
	hdr.SetContentTypeBytes(valueJSON)
	// The message is the caller's and never changes (core.Hint): the
	// response sends it without a copy.
	ctx.Response.SetBodyRaw(h.Message)
}

// Shared header names and values of the booking listener's answers.
var (
	headerOutcome     = []byte(HeaderOutcome)
	headerQueued      = []byte(HeaderQueued)
	headerConfigHash  = []byte(HeaderConfigHash)
	headerCopyDropped = []byte(HeaderCopyDropped)
	headerRetryAfter  = []byte("Retry-After")
	headerAllow       = []byte("Allow")
	headerLocation    = []byte("Location")
	headerNosniff     = []byte("X-Content-Type-Options")

	valueTrue    = []byte("true")
	valueFalse   = []byte("false")
	valueOne     = []byte("1")
	valueJSON    = []byte("application/json")
	valueYAML    = []byte("application/yaml")
	valueText    = []byte("text/plain; charset=utf-8")
	valueHTML    = []byte("text/html; charset=utf-8")
	valueNosniff = []byte("nosniff")
	valueOutcome = func() (v [core.OutcomeNotInPool + 1][]byte) {
		for o := range v {
			v[o] = []byte(core.Outcome(o).String())
		}
		return v
	}()
	copyDropValues = map[core.CopyDrop][]byte{
		core.CopyDropUnknownSource:     []byte(core.CopyDropUnknownSource.String()),
		core.CopyDropUnknownSourceRank: []byte(core.CopyDropUnknownSourceRank.String()),
	}
)

func outcomeValue(o core.Outcome) []byte {
	if o >= 0 && int(o) < len(valueOutcome) {
		return valueOutcome[o]
	}
	return []byte(o.String())
}

func copyDropValue(c core.CopyDrop) []byte {
	if v, ok := copyDropValues[c]; ok {
		return v
	}
	return []byte(c.String())
}

// bytesOf returns the bytes of s without a copy, for a callee that only
// reads them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (a *API) listWorkers(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"workers": a.Workers.List()})
}

func (a *API) getWorker(ctx *fasthttp.RequestCtx, id string) {
	wk, ok := a.Workers.Get(id)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, fmt.Errorf("worker %q is not registered", id))
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, wk)
}

func (a *API) putWorker(ctx *fasthttp.RequestCtx, id string) {
	var spec WorkerSpec
	if status, err := readJSON(requestBody(ctx), ctx.Request.Header.ContentLength(), maxWorkerBytes, &spec); err != nil {
		switch status {
		case fasthttp.StatusRequestEntityTooLarge:
			ctx.SetConnectionClose()
			lingerOnClose(ctx)
		case fasthttp.StatusRequestTimeout:
			ctx.SetConnectionClose()
		}
		writeError(ctx, status, err)
		return
	}
	if spec.ID != "" && spec.ID != id {
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("body id %q differs from the path's %q", spec.ID, id))
		return
	}
	spec.ID = id
	if err := a.Workers.Set(SourceAPI, spec); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	a.Log.Info("Registered worker", "worker", id, "endpoint", spec.HintEndpoint, "hintCapable", spec.HintCapable())
	wk, _ := a.Workers.Get(id)
	writeJSON(ctx, fasthttp.StatusOK, wk)
}

func (a *API) deleteWorker(ctx *fasthttp.RequestCtx, id string) {
	if !a.Workers.Delete(id) {
		writeError(ctx, fasthttp.StatusNotFound, fmt.Errorf("worker %q is not registered", id))
		return
	}
	a.Log.Info("Removed worker", "worker", id)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (a *API) config(ctx *fasthttp.RequestCtx) {
	doc, hash := a.Dispatcher.Config()
	if doc == nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, core.ErrNotReady)
		return
	}
	ctx.Response.Header.SetCanonical(headerConfigHash, []byte(hash))
	ctx.SetContentTypeBytes(valueYAML)
	ctx.Response.SetBody(doc)
}

// errorBody is the JSON of every 4xx and 5xx answer.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(ctx *fasthttp.RequestCtx, status int, err error) {
	writeJSON(ctx, status, errorBody{Error: err.Error()})
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.SetContentTypeBytes(valueJSON)
	ctx.SetStatusCode(status)
	enc := json.NewEncoder(ctx)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
