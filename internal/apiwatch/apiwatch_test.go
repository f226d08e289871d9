package apiwatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestPatientListWatch: while the API server cannot answer, a list or a
// watch is tried again inside the same call; an API error is returned at
// once, and so is the last error when the context ends.
func TestPatientListWatch(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	var lists, watches atomic.Int64
	var listErr, watchErr atomic.Pointer[error]
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if lists.Add(1) < 3 {
				return nil, down
			}
			if e := listErr.Load(); e != nil {
				return nil, *e
			}
			return &corev1.PodList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if watches.Add(1) < 3 {
				return nil, down
			}
			if e := watchErr.Load(); e != nil {
				return nil, *e
			}
			return watch.NewFake(), nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := Patient(ctx, lw).(*patientListWatch)
	p.every = time.Millisecond
	if _, err := p.ListWithContext(ctx, metav1.ListOptions{}); err != nil || lists.Load() != 3 {
		t.Errorf("list: %v after %d tries, want success on the third", err, lists.Load())
	}
	if w, err := p.WatchWithContext(ctx, metav1.ListOptions{}); err != nil || watches.Load() != 3 {
		t.Errorf("watch: %v after %d tries, want success on the third", err, watches.Load())
	} else {
		w.Stop()
	}

	gone := error(apierrors.NewResourceExpired("too old resource version"))
	watchErr.Store(&gone)
	before := watches.Load()
	if _, err := p.WatchWithContext(ctx, metav1.ListOptions{}); !apierrors.IsResourceExpired(err) || watches.Load() != before+1 {
		t.Errorf("410 Gone: %v after %d tries, want it returned at once", err, watches.Load()-before)
	}
	forbidden := error(apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")))
	listErr.Store(&forbidden)
	if _, err := p.ListWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("403: %v, want it returned at once", err)
	}

	// Down for good: the call returns when the sidecar stops.
	unavailable := error(apierrors.NewServiceUnavailable("starting"))
	listErr.Store(&unavailable)
	done := make(chan error)
	go func() { _, err := p.ListWithContext(ctx, metav1.ListOptions{}); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("after the end: %v, want the last error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a list kept retrying after its context ended")
	}
}
