// Package apiwatch makes client-go list-and-watch calls wait out an API
// server outage: the sidecar's informers and the manager's cache use it, so
// that both see the API server again within seconds of its return instead
// of after client-go's backoff. It also waits for a resource to be served
// (WhenServed), for the watches of CRDs another product installs, which
// may come after the manager starts.
//
// It imports client-go and apimachinery only (the sidecar imports it and
// links no controller-runtime), nothing of the operator.
package apiwatch

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// RetryInterval is how often a list or watch that cannot reach the API
// server is tried again.
const RetryInterval = 2 * time.Second

// patientListWatch lists, or starts a watch, again every RetryInterval, inside one call, while the API server cannot be
// reached (or answers 5xx or 429), until it answers or ctx ends. client-go's
// reflector backs off between failed list-and-watch attempts up to 30 s,
// with as much jitter again: after a 30 s API server outage the sidecar's
// ConfigMap watch came back 30 s after the API server did, and the
// manager's 20 to 39 s after (test/fault TestAPIServerOutage). Here the attempt fails only for good (an API
// error such as 410 Gone or 403, which the reflector must see) or when the
// sidecar stops, so its backoff never climbs. Both paths are patient: the
// reflector starts with a watch-list stream by default and lists only as a
// fallback.
type patientListWatch struct {
	lw    cache.ListerWatcherWithContext
	ctx   context.Context
	every time.Duration
}

// ListerWatcher lists and watches with and without a context, as client-go's
// informers take either.
type ListerWatcher interface {
	cache.ListerWatcher
	cache.ListerWatcherWithContext
}

// Patient wraps lw so that its lists and watches wait out an API server
// outage, trying again every RetryInterval until ctx (or the call's own
// context) ends. ctx bounds the calls made without a context.
func Patient(ctx context.Context, lw cache.ListerWatcher) ListerWatcher {
	return &patientListWatch{lw: cache.ToListerWatcherWithContext(lw), ctx: ctx, every: RetryInterval}
}

// retry reports whether err means the API server could not answer now.
func retry(err error) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code >= 500 || code == 429
	}
	return true // no answer at all: refused, reset, timed out
}

// wait sleeps one interval; false when ctx or the sidecar ended first.
func (p *patientListWatch) wait(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-p.ctx.Done():
		return false
	case <-time.After(p.every):
		return true
	}
}

func (p *patientListWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(p.ctx, o)
}

func (p *patientListWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	for {
		obj, err := p.lw.ListWithContext(ctx, o)
		if err == nil || !retry(err) || !p.wait(ctx) {
			return obj, err
		}
	}
}

func (p *patientListWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(p.ctx, o)
}

func (p *patientListWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	for {
		w, err := p.lw.WatchWithContext(ctx, o)
		if err == nil || !retry(err) || !p.wait(ctx) {
			return w, err
		}
	}
}
