package router

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// TestFloorServer is not a test: with KVHINT_FLOOR_LISTEN set (an address
// as --listen takes it) it serves a booking API that does nothing (reads
// the body, answers 204) on the sidecar's own stack: the same listener
// code, connection cap and fasthttp.Server with the booking server's
// limits. It runs until SIGTERM. hack/bench-listen.sh runs it as the floor
// the sidecar's CPU per booking is compared with.
func TestFloorServer(t *testing.T) {
	addr := os.Getenv("KVHINT_FLOOR_LISTEN")
	if addr == "" {
		t.Skip("KVHINT_FLOOR_LISTEN is not set: this is a benchmark server, not a test")
	}
	ln, err := listenAddr(addr, DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	cl := newCapListener(ln, DefaultMaxBookingConns, prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
	srv := newBookingServer(func(ctx *fasthttp.RequestCtx) {
		io.Copy(io.Discard, requestBody(ctx))
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}, serverLimits{read: DefaultReadTimeout, write: DefaultWriteTimeout, idle: DefaultIdleTimeout}, logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Shutdown(); cl.closeConns() }()
	t.Logf("floor server on %s", listenString(cl.Addr()))
	if err := srv.Serve(cl); err != nil {
		t.Fatal(err)
	}
}
