package simworker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Limits of the sink server.
const (
	// sinkReadTimeout bounds reading one request, body included, and the
	// wait for a new connection's first request.
	sinkReadTimeout = 10 * time.Second
	// sinkWriteTimeout bounds writing one answer.
	sinkWriteTimeout = 10 * time.Second
	// sinkIdleTimeout is how long a keep-alive connection may wait for its
	// next request: longer than the sidecar's hint client keeps an idle
	// connection for reuse (90 s), so that the sink never closes one under
	// a post that is on its way.
	sinkIdleTimeout = 2 * time.Minute
	// sinkPrefetch is the most of a body fasthttp reads before the handler
	// runs, which then reads the rest itself. A sidecar hint is a few KiB
	// and fits; a kv.fetch for a long prompt, up to about 1 MiB, streams
	// through a small buffer instead of being held whole. Every body is
	// capped at maxHintBytes by the handler, as the net/http worker caps it.
	sinkPrefetch = 8 << 10
)

// errBodyTooLarge refuses a body over maxHintBytes with net/http's words.
var errBodyTooLarge = &http.MaxBytesError{Limit: maxHintBytes}

// sinkServer serves a sink worker with fasthttp instead of net/http: a
// throughput run wants the worker to cost as little CPU as possible, since
// it shares the machine with the sidecar it measures. POST /v1/hints is
// answered in place, without a goroutine, a net/http request or a response
// writer; every other request goes to the worker's Handler through
// fasthttp's net/http adaptor.
type sinkServer struct {
	w     *Worker
	ln    net.Listener
	srv   *fasthttp.Server
	other fasthttp.RequestHandler
	// served is closed when Serve has returned.
	served chan struct{}

	mu sync.Mutex
	// conns are the open connections, for close to drop them and wait
	// for; closed is set once close began, and a connection accepted
	// after is dropped at once.
	conns  map[net.Conn]struct{}
	closed bool
	open   sync.WaitGroup
}

func startSink(w *Worker, ln net.Listener) *sinkServer {
	s := &sinkServer{
		w:      w,
		ln:     ln,
		other:  fasthttpadaptor.NewFastHTTPHandler(w.Handler()),
		served: make(chan struct{}),
		conns:  map[net.Conn]struct{}{},
	}
	s.srv = &fasthttp.Server{
		Handler:      s.serve,
		ErrorHandler: s.requestError,
		ConnState:    s.connState,
		ReadTimeout:  sinkReadTimeout,
		WriteTimeout: sinkWriteTimeout,
		IdleTimeout:  sinkIdleTimeout,
		// The handler reads what is left of a body, so that it can count a
		// hint it cannot read as rejected, as sinkHint does.
		StreamRequestBody:  true,
		MaxRequestBodySize: sinkPrefetch,
		// The answer to a hint is a status line and nothing else.
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		// Shutdown ends a connection once its request in progress is
		// answered; the answer says so.
		CloseOnShutdown: true,
		// A reset connection or a malformed request is the client's
		// business, not the worker's log's.
		Logger: discardLogger{},
	}
	go func() {
		defer close(s.served)
		s.srv.Serve(ln)
	}()
	return s
}

func (s *sinkServer) serve(ctx *fasthttp.RequestCtx) {
	if ctx.IsPost() && string(ctx.Path()) == HintPath {
		s.hint(ctx)
		return
	}
	// The adaptor reads a body whole: hand it one read within the cap.
	if body := ctx.RequestBodyStream(); body != nil {
		b, err := io.ReadAll(io.LimitReader(body, maxHintBytes+1))
		if err == nil && len(b) > maxHintBytes {
			err = errBodyTooLarge
		}
		if err != nil {
			badRequest(ctx, err)
			return
		}
		ctx.Request.SetBodyRaw(b)
	}
	s.other(ctx)
}

// hint counts a hint as sinkHint does and answers it as SetBehaviour says.
func (s *sinkServer) hint(ctx *fasthttp.RequestCtx) {
	w := s.w
	if err := discardBody(ctx.RequestBodyStream()); err != nil {
		w.mu.Lock()
		w.pushed.rejected++
		w.mu.Unlock()
		badRequest(ctx, err)
		return
	}
	w.mu.Lock()
	w.pushed.accepted++
	w.wakeLocked()
	status, delay := w.status, w.delay
	w.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	ctx.SetStatusCode(status)
}

// discardBody reads a body to its end, within maxHintBytes, and drops it.
func discardBody(body io.Reader) error {
	if body == nil {
		return nil
	}
	bp := sinkBufs.Get().(*[]byte)
	defer sinkBufs.Put(bp)
	n := 0
	for {
		m, err := body.Read(*bp)
		if n += m; n > maxHintBytes {
			return errBodyTooLarge
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// badRequest answers 400 with err, as http.Error would, and closes the
// connection: the rest of the body may be unread.
func badRequest(ctx *fasthttp.RequestCtx, err error) {
	ctx.SetStatusCode(http.StatusBadRequest)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(err.Error() + "\n")
	ctx.SetConnectionClose()
}

// requestError answers a request whose head could not be read, or did not
// come in time. fasthttp closes the connection after it.
func (s *sinkServer) requestError(ctx *fasthttp.RequestCtx, err error) {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		ctx.SetStatusCode(http.StatusRequestTimeout)
		return
	}
	badRequest(ctx, err)
}

// connState keeps the set of open connections that close drops. fasthttp
// reports a connection closed once its goroutine is done with it.
func (s *sinkServer) connState(c net.Conn, state fasthttp.ConnState) {
	switch state {
	case fasthttp.StateNew:
		s.mu.Lock()
		if s.closed {
			c.Close()
		} else {
			s.conns[c] = struct{}{}
			s.open.Add(1)
		}
		s.mu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.mu.Lock()
		if _, ok := s.conns[c]; ok {
			delete(s.conns, c)
			s.open.Done()
		}
		s.mu.Unlock()
	}
}

// close stops the server and drops its connections, even those carrying
// a request, and waits until they are done.
func (s *sinkServer) close() error {
	s.mu.Lock()
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	<-s.served
	s.open.Wait()
	if errors.Is(err, net.ErrClosed) {
		// A shutdown closed the listener already.
		err = nil
	}
	return err
}

// shutdown stops accepting and waits, until ctx is done, for requests in
// progress; it then drops the connections.
func (s *sinkServer) shutdown(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	if ctx.Err() != nil {
		s.close()
		return ctx.Err()
	}
	// fasthttp closes only the listeners Serve has taken; one called
	// right after Start may not have yet.
	if cerr := s.ln.Close(); err == nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	<-s.served
	return err
}

// discardLogger drops fasthttp's log lines.
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
