package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// TestBookingAPIClient books through pkg/bookingapi's client against a
// running sidecar, over loopback TCP and over its Unix socket: a hint is
// the message the sidecar answers, a booking without one returns nil, and
// a refused booking is an error that carries the sidecar's status and
// reason. The socket's answer is the same message as TCP's.
func TestBookingAPIClient(t *testing.T) {
	path := filepath.Join(sidecartest.SocketDir(t), "booking.sock")
	tcp := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) { o.Listen = listen.UnixScheme + path })
	w := startWorker(t, "w")
	registerWorker(t, tcp, w)
	req, _ := http.NewRequest(http.MethodPut, "http://localhost/v1/workers/w",
		strings.NewReader(fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q,"worker_type":"decode"}`, w.HintEndpoint())))
	if r := roundTrip(t, unixClient(path), req); r.status/100 != 2 {
		t.Fatalf("registering over the socket: %d %s", r.status, r.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	overTCP, err := bookingapi.NewClient("http://"+tcp.BookingAddr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	overUnix, err := bookingapi.NewClient("unix://"+path, 0)
	if err != nil {
		t.Fatal(err)
	}

	b := &bookingapi.Booking{RequestID: "client-1", Role: "decode", Worker: "w", PromptTokens: 64, BlockSize: 16,
		Session: hints.Session{ID: "s", Turn: 1, Final: true}}
	hint, err := overTCP.Book(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(hint), `"client-1"`) {
		t.Errorf("the hint over TCP does not carry the request ID: %s", hint)
	}
	viaSocket, err := overUnix.Book(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if string(viaSocket) != string(hint) {
		t.Errorf("over the socket the hint is\n%s\nover TCP\n%s", viaSocket, hint)
	}

	none, err := overTCP.Book(ctx, &bookingapi.Booking{RequestID: "client-2", Role: "decode", Worker: "nobody", PromptTokens: 64, BlockSize: 16})
	if err != nil || none != nil {
		t.Errorf("a booking of an unknown worker: %q, %v; want no hint and no error", none, err)
	}

	_, err = overTCP.Book(ctx, &bookingapi.Booking{RequestID: "client-3", Role: "no-such-role", Worker: "w", PromptTokens: 64, BlockSize: 16})
	if err == nil || !strings.Contains(err.Error(), "no-such-role") || !strings.HasPrefix(err.Error(), "the sidecar answered 4") {
		t.Errorf("a booking of an unknown role: %v; want the sidecar's refusal naming the role", err)
	}

	for _, base := range []string{"127.0.0.1:1", "unix://", "ftp://x"} {
		if _, err := bookingapi.NewClient(base, 0); err == nil || !strings.Contains(err.Error(), base) {
			t.Errorf("NewClient(%q): %v; want an error naming the address", base, err)
		}
	}
}
