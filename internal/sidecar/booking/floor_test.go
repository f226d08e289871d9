package booking

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
)

// TestFloorServer is not a test: with KVHINT_FLOOR_LISTEN set (an address
// as --listen takes it) it serves a booking API that does nothing (reads
// the body, answers 204, or 200 with given bodies: KVHINT_FLOOR_BODY) on
// the sidecar's own stack: the same listener
// code, connection cap and fasthttp.Server with the booking server's
// limits. It runs until SIGTERM. hack/bench-listen.sh and
// hack/bench-inband.sh run it as the floor the sidecar's CPU per booking
// is compared with.
func TestFloorServer(t *testing.T) {
	addr := os.Getenv("KVHINT_FLOOR_LISTEN")
	if addr == "" {
		t.Skip("KVHINT_FLOOR_LISTEN is not set: this is a benchmark server, not a test")
	}
	ln, err := listen.Open(addr, listen.DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	// With KVHINT_FLOOR_BODY (files separated by ':') the bookings are
	// answered in turn with each file's bytes, 200 as application/json, or
	// 204 for an empty file: the floor writes the answers the sidecar
	// writes when it carries its hints in-band, in the same mix.
	var bodies [][]byte
	if paths := os.Getenv("KVHINT_FLOOR_BODY"); paths != "" {
		for _, path := range filepath.SplitList(paths) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, b)
		}
	}
	var next atomic.Uint64
	cl := listen.NewCapListener(ln, listen.DefaultMaxBookingConns, prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
	srv := NewServer(func(ctx *fasthttp.RequestCtx) {
		io.Copy(io.Discard, requestBody(ctx))
		if bodies == nil {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		body := bodies[(next.Add(1)-1)%uint64(len(bodies))]
		if len(body) == 0 {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		// As the sidecar's answer: a shared header value, the body
		// without a copy.
		ctx.Response.Header.SetContentTypeBytes(valueJSON)
		ctx.Response.SetBodyRaw(body)
	}, listen.Limits{Read: listen.DefaultReadTimeout, Write: listen.DefaultWriteTimeout, Idle: listen.DefaultIdleTimeout}, logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Shutdown(); cl.CloseConns() }()
	t.Logf("floor server on %s", listen.Address(cl.Addr()))
	if err := srv.Serve(cl); err != nil {
		t.Fatal(err)
	}
}
