// Package admin serves the booking listener's cold routes on net/http's
// ServeMux: the worker registry and the config in force.
//
//	GET    /v1/workers        the registered workers
//	GET    /v1/workers/{id}   one worker
//	PUT    /v1/workers/{id}   register a worker (standalone mode only)
//	DELETE /v1/workers/{id}   remove a worker registered over the API
//	GET    /v1/config         the policy file in force, the config's hash in Kvhint-Config-Hash
//	POST   /v1/outcomes       a booked request's outcome (bookingapi.Outcome), kept by config hash; 204
//
// The ServeMux does all the routing: path cleaning and its redirects, 404,
// 405 with Allow, HEAD for GET. The routes share the booking listener, so
// they run on its fasthttp server through Handler, which hands the
// ServeMux a net/http request whose body is the server's stream: a body
// is read only as far as its limit (fasthttpadaptor would buffer it whole
// first).
//
// It imports workers, outcomes, booking (Book, for the spellings of the
// booking path only the ServeMux matches, and WriteError), jsonbody,
// listen, pkg/dispatch, pkg/bookingapi and fasthttp.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/jsonbody"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/outcomes"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// MaxWorkerBytes caps a worker registration body.
const MaxWorkerBytes = 64 << 10

// API serves the worker and config routes.
type API struct {
	Dispatcher *dispatch.Dispatcher
	Workers    *workers.Registry
	Log        logr.Logger
	// Book answers a booking whose path only the ServeMux recognises as
	// /v1/bookings (an escaped spelling, say); booking.API.Book.
	Book fasthttp.RequestHandler
	// Registration is why PUT and DELETE /v1/workers/{id} are off, or ""
	// where they are on: only in standalone mode, where a workers file or
	// the API is the source. In pod mode the workers are the pods the
	// roles' selectors pick, and nobody who reaches the listener may add
	// one.
	RegistrationOff string
	// Outcomes keeps the outcomes routers report; nil answers POST
	// /v1/outcomes 404.
	Outcomes *outcomes.Store
}

// BodyLimit is the body limit of a request the routes serve, for
// booking.API.OtherBodyLimit: MaxWorkerBytes for a registration,
// bookingapi.MaxOutcomeBytes for an outcome, 0 (the booking limit) for
// anything else.
func BodyLimit(method, path string) int {
	switch {
	case method == http.MethodPut && strings.HasPrefix(path, "/v1/workers/"):
		return MaxWorkerBytes
	case method == http.MethodPost && path == bookingapi.OutcomesPath:
		return bookingapi.MaxOutcomeBytes
	}
	return 0
}

// Mux is the routes' ServeMux.
func (a *API) Mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+booking.Path, func(w http.ResponseWriter, r *http.Request) {
		w.(*writer).fast = true
		a.Book(fastCtx(r))
	})
	mux.HandleFunc("GET /v1/workers", a.listWorkers)
	mux.HandleFunc("GET /v1/workers/{id}", a.getWorker)
	mux.HandleFunc("PUT /v1/workers/{id}", a.putWorker)
	mux.HandleFunc("DELETE /v1/workers/{id}", a.deleteWorker)
	mux.HandleFunc("GET /v1/config", a.config)
	mux.HandleFunc("POST "+bookingapi.OutcomesPath, a.reportOutcome)
	return mux
}

// Handler serves the routes on the booking listener's fasthttp server.
func (a *API) Handler() fasthttp.RequestHandler {
	mux := a.Mux()
	return func(ctx *fasthttp.RequestCtx) { serve(ctx, mux) }
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

// registrable answers a PUT or DELETE that may not change the registry
// (registration off, an invalid ID) and reports whether it may.
func (a *API) registrable(w http.ResponseWriter, id string) bool {
	if a.RegistrationOff != "" {
		writeError(w, http.StatusForbidden, fmt.Errorf("worker registration over the API is off: %s", a.RegistrationOff))
		return false
	}
	if err := workers.ValidateWorkerID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return false
	}
	return true
}

// registryStatus is the status of a refused registry change.
func registryStatus(err error) int {
	switch {
	case errors.Is(err, workers.ErrOtherSource):
		return http.StatusConflict
	case errors.Is(err, workers.ErrNotRegistered):
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

func (a *API) putWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !a.registrable(w, id) {
		fastCtx(r).SetConnectionClose() // the body is not read
		return
	}
	var spec workers.WorkerSpec
	if !readBody(w, r, MaxWorkerBytes, &spec) {
		return
	}
	if spec.ID != "" && spec.ID != id {
		writeError(w, http.StatusBadRequest, fmt.Errorf("body id %q differs from the path's %q", spec.ID, id))
		return
	}
	spec.ID = id
	if err := a.Workers.Set(workers.SourceAPI, spec); err != nil {
		writeError(w, registryStatus(err), err)
		return
	}
	a.Log.Info("Registered worker", "worker", id, "endpoint", spec.HintEndpoint, "hintCapable", spec.HintCapable())
	wk, _ := a.Workers.Get(id)
	writeJSON(w, http.StatusOK, wk)
}

// readBody decodes r's body, of at most limit bytes, into dst (strictly,
// jsonbody.Read), or answers the error and reports false.
func readBody(w http.ResponseWriter, r *http.Request, limit int, dst any) bool {
	ctx := fastCtx(r)
	status, err := jsonbody.Read(r.Body, ctx.Request.Header.ContentLength(), limit, dst)
	if err == nil {
		return true
	}
	switch status {
	case http.StatusRequestEntityTooLarge:
		// The rest of the body is not read: the connection cannot
		// carry another request.
		ctx.SetConnectionClose()
		listen.LingerOnClose(ctx.Conn())
	case http.StatusRequestTimeout:
		ctx.SetConnectionClose()
	}
	writeError(w, status, err)
	return false
}

// reportOutcome keeps a request's outcome: 204, or 400 with what is wrong
// with it (422 when its config hash has too many roles).
func (a *API) reportOutcome(w http.ResponseWriter, r *http.Request) {
	if a.Outcomes == nil {
		fastCtx(r).SetConnectionClose() // the body is not read
		writeError(w, http.StatusNotFound, errors.New("this sidecar keeps no outcomes"))
		return
	}
	var o bookingapi.Outcome
	if !readBody(w, r, bookingapi.MaxOutcomeBytes, &o) {
		return
	}
	if err := a.Outcomes.Add(&o); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, outcomes.ErrTooManyRoles) {
			status = http.StatusUnprocessableEntity
		}
		writeError(w, status, fmt.Errorf("outcome: %w", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !a.registrable(w, id) {
		return
	}
	if err := a.Workers.Delete(workers.SourceAPI, id); err != nil {
		writeError(w, registryStatus(err), err)
		return
	}
	a.Log.Info("Removed worker", "worker", id)
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) config(w http.ResponseWriter, _ *http.Request) {
	if !a.Dispatcher.Ready() {
		writeError(w, http.StatusServiceUnavailable, dispatch.ErrNotReady)
		return
	}
	// A compiled config with no accepted role has no policy file: the
	// body is empty. The hash is the config's (for a compiled ConfigMap,
	// over hints.yaml and roles.yaml), so it can be compared with the
	// ConfigMap's annotation, not with the body's own hash.
	doc, hash := a.Dispatcher.Config()
	w.Header().Set(booking.HeaderConfigHash, hash)
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(doc)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{err.Error()})
}

// writeJSON answers as booking.WriteError does: indented JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// ctxKey is the request context key of the fasthttp request a net/http
// request stands for.
type ctxKey struct{}

func fastCtx(r *http.Request) *fasthttp.RequestCtx {
	return r.Context().Value(ctxKey{}).(*fasthttp.RequestCtx)
}

// serve runs mux on a fasthttp request: it does what net/http's server
// does before a handler (the * target, a path that does not unescape),
// hands mux a request whose body is the server's stream, and writes the
// answer back.
func serve(ctx *fasthttp.RequestCtx, mux http.Handler) {
	target := string(ctx.Request.Header.RequestURI())
	method := string(ctx.Method())
	if target == "*" {
		// The request target of OPTIONS for the whole server.
		if method == fasthttp.MethodOptions {
			ctx.Response.Header.SetContentLength(0)
			return
		}
		ctx.SetConnectionClose()
		booking.WriteError(ctx, fasthttp.StatusBadRequest, errors.New("malformed request: * is a request target of OPTIONS only"))
		return
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		// net/http refuses such a request before any handler.
		var esc url.EscapeError
		if errors.As(err, &esc) {
			err = esc
		}
		ctx.SetConnectionClose()
		booking.WriteError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("malformed request: path: %w", err))
		return
	}
	r := &http.Request{
		Method:        method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header),
		Body:          io.NopCloser(requestBody(ctx)),
		ContentLength: int64(ctx.Request.Header.ContentLength()),
		Host:          string(ctx.Host()),
		RemoteAddr:    ctx.RemoteAddr().String(),
		RequestURI:    target,
	}
	if !ctx.Request.Header.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	for k, v := range ctx.Request.Header.All() {
		r.Header.Add(string(k), string(v))
	}
	r = r.WithContext(context.WithValue(context.Background(), ctxKey{}, ctx))
	w := &writer{ctx: ctx, header: make(http.Header)}
	mux.ServeHTTP(w, r)
	if w.fast {
		return // the handler answered on ctx itself
	}
	w.WriteHeader(http.StatusOK)
}

// requestBody is the request's body as a reader: the stream the server
// reads it from, or, for a request the server read whole or without a
// body, its bytes.
func requestBody(ctx *fasthttp.RequestCtx) io.Reader {
	if r := ctx.RequestBodyStream(); r != nil {
		return r
	}
	return bytes.NewReader(ctx.Request.Body())
}

// writer is an http.ResponseWriter onto a fasthttp response.
type writer struct {
	ctx    *fasthttp.RequestCtx
	header http.Header
	wrote  bool
	// fast is set by a handler that answers on ctx itself.
	fast bool
}

func (w *writer) Header() http.Header { return w.header }

func (w *writer) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.ctx.SetStatusCode(status)
	for k, vs := range w.header {
		if k == "Content-Length" {
			continue // fasthttp sets it from the body
		}
		for i, v := range vs {
			if i == 0 {
				w.ctx.Response.Header.Set(k, v)
			} else {
				w.ctx.Response.Header.Add(k, v)
			}
		}
	}
}

func (w *writer) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.ctx.Response.AppendBody(b)
	return len(b), nil
}
