// Package managertest runs the manager inside a test process, as `kvhint
// manager` builds it: the same cache options, indexes and reconcilers,
// over the suite's control plane. Only tests import it; it imports
// controllers, the built-in hint catalog and controller-runtime.
package managertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/managercache"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// Options shape the manager a test runs.
type Options struct {
	// Name names the suite in messages.
	Name string
	// Scheme is the manager's; it holds at least controllers.NewScheme's
	// types.
	Scheme *runtime.Scheme
	// NewClient, when set, builds the manager's client (to count its
	// writes, say).
	NewClient client.NewClientFunc
	// Metrics, when set, gets the manager's own metrics
	// (controllers.RegisterMetrics).
	Metrics prometheus.Registerer
	// Controllers, when set, are the reconcilers' options; nil: those of
	// controllers.Setup, the shipped defaults.
	Controllers *controllers.Options
	// Restartable lets the process build a second manager after the
	// first stops (controller names are checked once per process).
	Restartable bool
}

// syncTimeout bounds the wait for the manager's caches.
const syncTimeout = 30 * time.Second

// Start starts the manager against cfg and waits for its caches; stop
// stops it and waits until it has.
func Start(cfg *rest.Config, o Options) (stop func(), err error) {
	opts := ctrl.Options{
		Scheme:                 o.Scheme,
		Cache:                  managercache.Options(nil),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewClient:              o.NewClient,
	}
	if o.Restartable {
		skip := true
		opts.Controller = config.Controller{SkipNameValidation: &skip}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	setup := controllers.Options{CatalogLimits: controllers.DefaultCatalogLimits()}
	if o.Controllers != nil {
		setup = *o.Controllers
	}
	if err := controllers.SetupWithOptions(ctx, mgr, builtin.NewCatalog(), setup); err != nil {
		cancel()
		return nil, err
	}
	if o.Metrics != nil {
		if err := controllers.RegisterMetrics(o.Metrics, mgr); err != nil {
			cancel()
			return nil, err
		}
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, syncTimeout)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		<-done
		return nil, errors.New("the manager's caches did not sync")
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "%s: manager stopped with: %v\n", o.Name, err)
		}
	}, nil
}
