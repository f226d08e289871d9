package router

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
)

// PodWorkers keeps the registry's pod workers in step with the pods a label
// selector picks in one namespace. A pod's ID is its name; its capabilities,
// hint endpoint and worker type come from its annotations. Pods without
// router_hint are registered too, so that their bookings are counted as
// not_hint_capable rather than unknown_worker.
//
// The compiled hints YAML carries no worker selectors (routers book workers
// by name), so the selector is the sidecar's: its --worker-selector flag,
// usually the labels of the RouterRoles' workerSelectors.
type PodWorkers struct {
	Client    kubernetes.Interface
	Namespace string
	// Selector picks the worker pods; empty selects every pod of the
	// namespace (only those that advertise router_hint get hints).
	Selector labels.Selector
	Registry *Registry
	// AllowAbsoluteEndpoints takes absolute hint endpoint URLs from pod
	// annotations; by default only ":PORT/PATH" on the pod's IP is.
	AllowAbsoluteEndpoints bool

	// synced is the informer's HasSynced, set once Run has built it.
	synced atomic.Pointer[func() bool]
}

// Synced reports whether the initial list has been registered; /readyz
// waits for it so that early bookings are not all unknown_worker.
func (p *PodWorkers) Synced() error {
	if f := p.synced.Load(); f == nil || !(*f)() {
		return fmt.Errorf("worker pods in %s not listed yet", p.Namespace)
	}
	return nil
}

// Run watches the pods until ctx is done.
func (p *PodWorkers) Run(ctx context.Context, log logr.Logger) {
	sel := p.Selector
	if sel == nil {
		sel = labels.Everything()
	}
	log = log.WithValues("namespace", p.Namespace, "selector", sel.String())
	upsert := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		spec, ok, err := PodWorkerSpec(pod, p.AllowAbsoluteEndpoints)
		if err != nil {
			log.Error(err, "Ignoring worker pod", "pod", pod.Name)
			p.Registry.Delete(pod.Name)
			return
		}
		if !ok {
			p.Registry.Delete(pod.Name)
			return
		}
		if err := p.Registry.Set(SourcePods, spec); err != nil {
			log.Error(err, "Ignoring worker pod", "pod", pod.Name)
			p.Registry.Delete(pod.Name)
		}
	}
	remove := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			p.Registry.Delete(pod.Name)
		}
	}
	lw := cache.NewFilteredListWatchFromClient(p.Client.CoreV1().RESTClient(), "pods", p.Namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: apiwatch.Patient(ctx, lw),
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    upsert,
			UpdateFunc: func(_, obj any) { upsert(obj) },
			DeleteFunc: remove,
		},
	})
	hasSynced := ctrl.HasSynced
	p.synced.Store(&hasSynced)
	log.Info("Watching worker pods")
	ctrl.RunWithContext(ctx)
}

// PodWorkerSpec reads a worker from a pod. It reports false for a pod that
// cannot take hints now and should not be registered: one being deleted,
// finished, or with no IP yet. The hint endpoint annotation is a port and
// a path on the pod's own IP (":8081/v1/hints"); an absolute URL is an
// error unless allowAbsolute, so that no annotation can make the sidecar
// post to another host, its own loopback included.
func PodWorkerSpec(pod *corev1.Pod, allowAbsolute bool) (WorkerSpec, bool, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return WorkerSpec{}, false, nil
	}
	spec := WorkerSpec{ID: pod.Name, WorkerType: pod.Annotations[AnnotationWorkerType]}
	for _, c := range strings.Split(pod.Annotations[AnnotationCapabilities], ",") {
		if c = strings.TrimSpace(c); c != "" {
			spec.Capabilities = append(spec.Capabilities, c)
		}
	}
	if ep := strings.TrimSpace(pod.Annotations[AnnotationHintEndpoint]); ep != "" {
		if strings.HasPrefix(ep, ":") && pod.Status.PodIP == "" {
			// The pod template cannot know its pod's IP: wait for it.
			return WorkerSpec{}, false, nil
		}
		url, err := podHintEndpoint(pod.Status.PodIP, ep, allowAbsolute)
		if err != nil {
			return WorkerSpec{}, false, fmt.Errorf("worker pod %s: %w", pod.Name, err)
		}
		spec.HintEndpoint = url
	}
	return spec, true, nil
}
