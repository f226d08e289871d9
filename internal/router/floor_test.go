package router

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestFloorServer is not a test: with KVHINT_FLOOR_LISTEN set (an address
// as --listen takes it) it serves a booking API that does nothing (reads
// the body, answers 204) on the sidecar's own stack: the same listener
// code, connection cap and http.Server limits. It runs until SIGTERM.
// hack/bench-listen.sh runs it as the floor the sidecar's CPU per booking
// is compared with.
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
	hs := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}), serverLimits{read: DefaultReadTimeout, write: DefaultWriteTimeout, idle: DefaultIdleTimeout})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); hs.Close() }()
	t.Logf("floor server on %s", listenString(cl.Addr()))
	if err := hs.Serve(cl); err != http.ErrServerClosed {
		t.Fatal(err)
	}
}
