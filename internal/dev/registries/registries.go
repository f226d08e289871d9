// Package registries builds the product's two Prometheus registries as
// its binaries fill them, for the tools that document and check the
// metrics (tools/docgen's metrics reference, tools/observability's alert
// and dashboard checks): a standalone sidecar started on loopback with a
// small config, and the manager's registry with its collector registered
// on a manager that is built but not started. Development only: kvhint
// links none of it.
package registries

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// Describer lists a registry's metric descriptors, those of vectors with
// no series yet included.
type Describer interface{ Describe(chan<- *prometheus.Desc) }

// Sidecar starts a standalone sidecar on loopback with a one-role kvcr
// config and returns it once the config is loaded (its registry is
// s.Metrics, its /metrics at s.OpsAddr()); stop shuts it down and removes
// its config.
func Sidecar() (s *sidecar.Sidecar, stop func(), err error) {
	dir, err := os.MkdirTemp("", "kvhint-registries-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	cfg := filepath.Join(dir, "hints.yaml")
	if err := os.WriteFile(cfg, []byte("worker_selection:\n  decode:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.5}\n"), 0o644); err != nil {
		cleanup()
		return nil, nil, err
	}
	s, err = sidecar.New(sidecar.Options{Catalog: builtin.NewCatalog(), ConfigFile: cfg, Poll: 50 * time.Millisecond,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: logr.Discard()})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := s.Start(context.Background()); err != nil {
		cleanup()
		return nil, nil, err
	}
	stop = func() {
		s.Shutdown(context.Background())
		cleanup()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !s.Dispatcher.Ready() {
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("the sidecar did not load %s", cfg)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s, stop, nil
}

// Manager returns the manager's registry as `kvhint manager` fills it:
// controller-runtime's, which its packages fill when they load, with the
// manager's own collector registered by controllers.RegisterMetrics on a
// manager that is built, not started (it needs no API server for that).
// Call it once per process: the registry is controller-runtime's global.
func Manager() (prometheus.Gatherer, Describer, error) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, nil, err
	}
	if err := controllers.RegisterMetrics(ctrlmetrics.Registry, mgr); err != nil {
		return nil, nil, err
	}
	d, ok := ctrlmetrics.Registry.(Describer)
	if !ok {
		return nil, nil, fmt.Errorf("controller-runtime's registry (%T) cannot describe its metrics", ctrlmetrics.Registry)
	}
	return ctrlmetrics.Registry, d, nil
}
