package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

// BenchmarkReportOutcomeHTTP is one outcome as a router reports it after
// its request: POST /v1/outcomes through bookingapi's client over a
// keep-alive loopback connection, to the 204.
func BenchmarkReportOutcomeHTTP(b *testing.B) {
	path := filepath.Join(b.TempDir(), "hints.yaml")
	if err := os.WriteFile(path, []byte(dispatchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Catalog: testCatalog(b), ConfigFile: path, Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	c, err := bookingapi.NewClient("http://"+s.BookingAddr(), 0)
	if err != nil {
		b.Fatal(err)
	}
	o := &bookingapi.Outcome{RequestID: "req-7f3a9c2e-5b1d-4e8a-9c6f-0d2b3a4e5f60", Role: "decode", Worker: "decode-worker-0",
		ConfigHash: "0123456789abcdef", PromptTokens: 4096, CachedTokens: 3072, TTFTSeconds: 0.084}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.ReportOutcome(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
}
