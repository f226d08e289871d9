package apiwatch

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// WhenServed runs start once the API server serves gvr, looking for it in
// discovery every interval until then, and returns what start returns. A
// resource of a CRD that another product installs (Dynamo's
// DynamoGraphDeployment) may be missing from a cluster, and may be
// installed after the manager starts: what reads it starts when it
// appears, and a cluster without it never gets past the wait. WhenServed
// returns nil, without calling start, when ctx ends first. A failed look
// (the API server down, discovery refused) is passed to failed, when not
// nil, and looked at again at the next tick.
func WhenServed(ctx context.Context, dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource, interval time.Duration,
	failed func(error), start func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := Served(dc, gvr)
		if err != nil && failed != nil {
			failed(err)
		}
		if ok {
			return start(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Served reports whether the API server serves gvr: its group version is
// in discovery and lists the resource.
func Served(dc discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovery of %s: %w", gvr.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}
