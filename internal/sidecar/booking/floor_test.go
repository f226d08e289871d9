package booking

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
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
	ln, err := listen.Open(addr, listen.DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	cl := listen.NewCapListener(ln, listen.DefaultMaxBookingConns, prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
	srv := NewServer(func(ctx *fasthttp.RequestCtx) {
		io.Copy(io.Discard, requestBody(ctx))
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}, listen.Limits{Read: listen.DefaultReadTimeout, Write: listen.DefaultWriteTimeout, Idle: listen.DefaultIdleTimeout}, logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Shutdown(); cl.CloseConns() }()
	t.Logf("floor server on %s", listen.Address(cl.Addr()))
	if err := srv.Serve(cl); err != nil {
		t.Fatal(err)
	}
}
