package booking

import (
	"errors"
	"fmt"
	"net"

	"github.com/go-logr/logr"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
)

// NewServer is the booking listener's server, with the limits every
// sidecar listener has. Bookings are the sidecar's hot path, and fasthttp
// reuses each connection's request and response and starts no goroutine
// per request: a booking costs fewer allocations, less GC and fewer
// wake-ups than on net/http. The reads and writes, most of a server's
// cost on loopback, are the same.
//
//   - ReadTimeout bounds a request, head and body, from its first byte (a
//     connection's first request: from the accept), as net/http's
//     ReadTimeout does; the separate head timeout of the other listeners has
//     no fasthttp equivalent. A body still arriving when it passes is
//     answered 408.
//   - The read buffer is the head limit: a head that does not fit in it is
//     answered 431.
//   - Bodies are streamed (StreamRequestBody): the handler reads them, into
//     a buffer that grows as bytes arrive, and answers one over its limit
//     413. Read whole, a body would be allocated at its declared
//     Content-Length before a byte of it came, which a stalled client could
//     make cost megabytes; and fasthttp would answer one over the limit
//     itself. MaxRequestBodySize is then only what fasthttp reads of a body
//     before it calls the handler (it reads the least of it, the
//     Content-Length and 8 KiB): one byte, so that a body declared over the
//     limit is refused as soon as it starts, not once 8 KiB of it came.
//     One that asks "Expect: 100-continue" is refused before it starts
//     (API.ExpectBody, set as the server's ExpectHandler).
//   - Answers during a shutdown say Connection: close, as net/http's do:
//     a client must not send its next booking on a connection about to
//     close, since a POST is not retried.
//   - No Server header, no default Content-Type, and multipart bodies are
//     not parsed: the API takes JSON, which a multipart body is not.
//   - Errors (a malformed request, a client gone) are logged at V(1), and
//     without request contents: they are the clients' problem, and
//     net/http does not log them at all.
func NewServer(h fasthttp.RequestHandler, lim listen.Limits, log logr.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      h,
		ErrorHandler:                 answerServerError,
		ReadTimeout:                  lim.Read,
		WriteTimeout:                 lim.Write,
		IdleTimeout:                  lim.Idle,
		ReadBufferSize:               listen.MaxHeaderBytes,
		MaxRequestBodySize:           1,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		SecureErrorLogMessage:        true,
		Logger:                       serverLog{log},
	}
}

// answerServerError answers a request fasthttp could not read (the
// handler never saw it) with a JSON error, as the API answers its own. The
// connection is closed after it.
func answerServerError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		WriteError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, fmt.Errorf("request head is over the %d-byte limit", listen.MaxHeaderBytes))
	case errors.As(err, &ne) && ne.Timeout():
		WriteError(ctx, fasthttp.StatusRequestTimeout, errors.New("the request was not read within the read timeout"))
	default:
		WriteError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("malformed request: %w", err))
	}
}

// serverLog takes fasthttp's log lines.
type serverLog struct{ log logr.Logger }

func (l serverLog) Printf(format string, args ...any) {
	l.log.V(1).Info("Booking server", "detail", fmt.Sprintf(format, args...))
}
