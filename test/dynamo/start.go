package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Start runs the stand-in in a manager of its own against the API server
// of cfg (no metrics or probe listeners, no leader election), waits for its
// caches, and returns a function that stops it and waits until it has,
// returning the error the manager stopped with.
func Start(cfg *rest.Config) (stop func() error, err error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// A test process may run the product's manager beside this one.
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("the stand-in's manager: %w", err)
	}
	if err := (&StandIn{}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return nil, errors.Join(errors.New("the stand-in's caches did not sync"), <-done)
	}
	return func() error {
		cancel()
		return <-done
	}, nil
}
