// Package ops serves the sidecar's operational endpoints: /metrics (the
// sidecar's own Prometheus registry, which it creates with the Go and
// process collectors), /healthz and /readyz on the ops listener, and
// net/http/pprof on a loopback listener of its own.
//
// It imports pkg/dispatch (readiness and the config hash) and Prometheus;
// nothing of the sidecar.
package ops

import (
	"fmt"
	"io"
	"net/http"
	httppprof "net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// NewRegistry is a new metrics registry with the Go and process
// collectors: each sidecar has its own, so that tests can run many in one
// process. Every room registers its metrics in it.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves /metrics from reg, /healthz, and /readyz: ready once d
// has a config and ready, when set, holds too (the pod informer has
// synced, say).
func Handler(reg *prometheus.Registry, d *dispatch.Dispatcher, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.Ready() {
			http.Error(w, "not ready: "+dispatch.ErrNotReady.Error(), http.StatusServiceUnavailable)
			return
		}
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintf(w, "ok: config %s\n", d.ConfigHash())
	})
	return mux
}

// PprofHandler serves the profiles of net/http/pprof under /debug/pprof/,
// for a listener of their own on loopback: a heap profile shows what the
// process holds.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	return mux
}
