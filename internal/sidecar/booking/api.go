// Package booking is the sidecar's hot path: POST /v1/bookings on
// fasthttp, from the booking listener's server (its limits, its answers to
// requests it cannot read) through the body decoder (decode.go, beside its
// differential and fuzz tests) to the dispatcher's answer. Every other
// request on the listener goes to API.Other: the worker and config routes
// (package admin).
//
// It imports pkg/dispatch (the dispatcher and its Booking), pkg/hints,
// listen (the listener's limits and lingering close), jsonbody and
// fasthttp; nothing else of the sidecar.
package booking

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"unsafe"

	"github.com/go-logr/logr"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// MaxBookingBytesFlag is the flag that sets the booking limit, named in the
// 413 answer.
const MaxBookingBytesFlag = "--max-booking-bytes"

// Path is the booking route's path.
const Path = "/v1/bookings"

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

// API answers bookings on the booking listener, and hands every other
// request to Other.
type API struct {
	Dispatcher *dispatch.Dispatcher
	Log        logr.Logger
	// MaxBookingBytes caps a booking body; 0 means
	// dispatch.DefaultMaxBookingBytes. It should be the dispatcher's own
	// limit.
	MaxBookingBytes int
	// Other serves every request but POST /v1/bookings; nil answers them
	// 404.
	Other fasthttp.RequestHandler
	// OtherBodyLimit, when set, is the body limit of a request Other
	// serves, by method and path; 0 means the booking limit.
	OtherBodyLimit func(method, path string) int
	// Budget bounds the memory of the bookings in flight; nil is no bound.
	Budget *Budget
	// Record, when set, is handed every booking the dispatcher answered
	// (the trace recorder); it must not block or keep the booking.
	Record func(b *dispatch.Booking, h dispatch.Hint)
	// Stage, when set, books in place of Dispatcher: the rollout's stage
	// (package stage), which books with the stable config or a candidate.
	// The answer's Kvhint-Config-Hash names the config that booked.
	Stage Booker
}

// Booker books one booking, as Dispatcher.Book does.
type Booker interface {
	Book(ctx context.Context, b *dispatch.Booking) (dispatch.Hint, error)
}

// Handler serves the booking listener: POST /v1/bookings, a booking, 200
// with the hint or 204 with no message; everything else through Other.
func (a *API) Handler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer a.recoverPanic(ctx)
		if string(ctx.URI().PathOriginal()) == Path && string(ctx.Method()) == fasthttp.MethodPost {
			a.Book(ctx)
			return
		}
		if a.Other == nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		a.Other(ctx)
	}
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
	WriteError(ctx, fasthttp.StatusInternalServerError, errors.New("internal error; the sidecar's log has it"))
}

// bookingLimit is the booking body limit in force.
func (a *API) bookingLimit() int {
	if a.MaxBookingBytes > 0 {
		return a.MaxBookingBytes
	}
	return dispatch.DefaultMaxBookingBytes
}

// requestBody is the request's body as a reader: the stream the server
// reads it from (NewServer streams bodies), or, for a request the
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
	booking := method == fasthttp.MethodPost && path == Path
	if !booking && a.OtherBodyLimit != nil {
		if l := a.OtherBodyLimit(method, path); l > 0 {
			limit = l
		}
	}
	if declared <= limit {
		return fasthttp.StatusContinue
	}
	if booking {
		a.Dispatcher.RecordTooLargeBooking()
	}
	return fasthttp.StatusRequestEntityTooLarge
}

// Book answers one booking. Handler calls it for POST /v1/bookings; the
// admin routes for the other spellings of that path (escaped, say) that
// net/http's ServeMux matches to it.
func (a *API) Book(ctx *fasthttp.RequestCtx) {
	declared := ctx.Request.Header.ContentLength()
	body := requestBody(ctx)
	if cr := a.Budget.charged(body, declared); cr != nil {
		defer cr.release()
		body = cr
	}
	var req decoded
	if status, err := readBooking(body, declared, a.bookingLimit(), &req); err != nil {
		if errors.Is(err, errOverBudget) {
			a.Budget.refuseOverBudget(ctx)
			return
		}
		switch status {
		case fasthttp.StatusRequestEntityTooLarge:
			a.Dispatcher.RecordTooLargeBooking()
			// The rest of the body is not read: the connection cannot
			// carry another request.
			ctx.SetConnectionClose()
			listen.LingerOnClose(ctx.Conn())
		case fasthttp.StatusRequestTimeout:
			// Too slow a client, not an invalid booking; the connection's
			// deadline has passed.
			ctx.SetConnectionClose()
		default:
			a.Dispatcher.RecordInvalidBooking()
		}
		WriteError(ctx, status, err)
		return
	}
	b, err := req.booking()
	if err != nil {
		a.Dispatcher.RecordInvalidBooking()
		WriteError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	// Not ctx: a RequestCtx is done when the server begins to shut down,
	// which would cut short the bookings the shutdown grace lets finish
	// (a policy may watch its context), and it is reused once the handler
	// returns. net/http's request context was not cancelled by a shutdown
	// either. A policy's time is bounded by the dispatcher's deadline.
	var h dispatch.Hint
	if a.Stage != nil {
		h, err = a.Stage.Book(context.Background(), b)
	} else {
		h, err = a.Dispatcher.Book(context.Background(), b)
	}
	switch {
	case errors.Is(err, dispatch.ErrNotReady):
		ctx.Response.Header.SetCanonical(headerRetryAfter, valueOne)
		WriteError(ctx, fasthttp.StatusServiceUnavailable, err)
		return
	case errors.Is(err, dispatch.ErrUnknownRole):
		WriteError(ctx, fasthttp.StatusUnprocessableEntity, err)
		return
	case errors.Is(err, dispatch.ErrBookingTooLarge):
		WriteError(ctx, fasthttp.StatusRequestEntityTooLarge, err)
		return
	case err != nil:
		WriteError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	if a.Record != nil {
		a.Record(b, h)
	}
	// The header names and values are shared, read-only slices the
	// response header copies into its own reused buffers: building them
	// per answer would cost allocations.
	hdr := &ctx.Response.Header
	hdr.SetCanonical(headerOutcome, outcomeValue(h.Outcome))
	hdr.SetCanonical(headerConfigHash, bytesOf(h.ConfigHash))
	if h.CopyDrop != dispatch.CopyKept {
		hdr.SetCanonical(headerCopyDropped, copyDropValue(h.CopyDrop))
	}
	if h.Outcome != dispatch.OutcomeHinted {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if h.Queued {
		hdr.SetCanonical(headerQueued, valueTrue)
	} else {
		hdr.SetCanonical(headerQueued, valueFalse)
	}
	hdr.SetContentTypeBytes(valueJSON)
	// The message is the caller's and never changes (dispatch.Hint): the
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

	valueTrue    = []byte("true")
	valueFalse   = []byte("false")
	valueOne     = []byte("1")
	valueJSON    = []byte("application/json")
	valueOutcome = func() (v [dispatch.OutcomeNotInPool + 1][]byte) {
		for o := range v {
			v[o] = []byte(dispatch.Outcome(o).String())
		}
		return v
	}()
	copyDropValues = map[dispatch.CopyDrop][]byte{
		dispatch.CopyDropUnknownSource:     []byte(dispatch.CopyDropUnknownSource.String()),
		dispatch.CopyDropUnknownSourceRank: []byte(dispatch.CopyDropUnknownSourceRank.String()),
	}
)

func outcomeValue(o dispatch.Outcome) []byte {
	if o >= 0 && int(o) < len(valueOutcome) {
		return valueOutcome[o]
	}
	return []byte(o.String())
}

func copyDropValue(c dispatch.CopyDrop) []byte {
	if v, ok := copyDropValues[c]; ok {
		return v
	}
	return []byte(c.String())
}

// bytesOf returns the bytes of s without a copy, for a callee that only
// reads them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// errorBody is the JSON of every 4xx and 5xx answer.
type errorBody struct {
	Error string `json:"error"`
}

// WriteError answers status with err as the JSON error body, as every
// 4xx and 5xx answer of the booking listener is.
func WriteError(ctx *fasthttp.RequestCtx, status int, err error) {
	writeJSON(ctx, status, errorBody{Error: err.Error()})
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.SetContentTypeBytes(valueJSON)
	ctx.SetStatusCode(status)
	enc := json.NewEncoder(ctx)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
