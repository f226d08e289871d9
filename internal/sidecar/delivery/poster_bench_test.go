package delivery

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"
)

// BenchmarkDeliveryPost is one hint post as a queue's sender makes it, over
// a kept-alive loopback connection to a worker that answers 204 and does
// nothing else (a fasthttp server, which allocates nothing per request, so
// that allocs/op are the poster's). The post runs on the benchmark's
// goroutine; the queue's own sender stays idle.
func BenchmarkDeliveryPost(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusNoContent) }}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	for _, bc := range []struct {
		name string
		msg  string
	}{
		{"small", message("bench", staticJSON(1, "x"))},
		{"4KiB", message("bench", staticJSON(1, strings.Repeat("x", 4000)))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := NewMetrics(prometheus.NewRegistry())
			del := New(Options{Metrics: m, Timeout: 5 * time.Second, HintTTL: time.Hour, Log: logr.Discard()})
			b.Cleanup(func() { del.Close(context.Background()) })
			q := del.NewQueue("w", "http://"+ln.Addr().String()+"/v1/hints")
			it := queued{msg: []byte(bc.msg), at: time.Now()}
			q.post(it) // dials
			n := 1
			b.SetBytes(int64(len(bc.msg)))
			b.ReportAllocs()
			for b.Loop() {
				q.post(it)
				n++
			}
			if sent := testutil.ToFloat64(m.hintsSent); sent != float64(n) {
				b.Fatalf("%v of %d hints sent", sent, n)
			}
		})
	}
}
