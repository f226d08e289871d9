package apiwatch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// TestWhenServed: over real HTTP discovery, start runs only once the
// group version lists the resource; a failed look is reported and looked
// at again; a context that ends first returns without start.
func TestWhenServed(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "nvidia.com", Version: "v1beta1", Resource: "dynamographdeployments"}
	// state: 0 the group is not served, 1 a 500, 2 served without the
	// resource, 3 served with it.
	var state, looks atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/nvidia.com/v1beta1" {
			http.NotFound(w, r)
			return
		}
		looks.Add(1)
		list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gvr.GroupVersion().String()}
		switch state.Load() {
		case 0:
			http.NotFound(w, r)
			return
		case 1:
			http.Error(w, "down", http.StatusInternalServerError)
			return
		case 3:
			list.APIResources = []metav1.APIResource{{Name: gvr.Resource, Namespaced: true, Kind: "DynamoGraphDeployment"}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&list)
	}))
	defer srv.Close()
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var failures atomic.Int32
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- WhenServed(ctx, dc, gvr, 5*time.Millisecond, func(error) { failures.Add(1) }, func(context.Context) error {
			close(started)
			return nil
		})
	}()
	for s := int32(0); s < 3; s++ {
		state.Store(s)
		before := looks.Load()
		for looks.Load() < before+2 {
			time.Sleep(time.Millisecond)
		}
		select {
		case <-started:
			t.Fatalf("started in state %d: the resource is not served", s)
		default:
		}
	}
	if failures.Load() == 0 {
		t.Error("the 500 was not reported as a failed look")
	}
	state.Store(3)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("not started once the resource was served")
	}
	if err := <-done; err != nil {
		t.Errorf("WhenServed: %v", err)
	}

	// Never served: the context ends the wait, start is not called.
	state.Store(0)
	short, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	err = WhenServed(short, dc, gvr, 5*time.Millisecond, nil, func(context.Context) error {
		t.Error("started for a resource that is not served")
		return nil
	})
	if err != nil {
		t.Errorf("WhenServed after its context ended: %v, want nil", err)
	}
}
