package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodWorkers keeps the registry's pod workers in step with the worker pods
// of one namespace. A pod's ID is its name; its capabilities, hint
// endpoint, worker type and source endpoints come from its annotations,
// its pools from its labels. Pods without router_hint are registered too,
// so that their bookings are counted as not_hint_capable rather than
// unknown_worker.
//
// Which pods: the union of the roles' worker selectors (the compiled
// ConfigMap's worker-selectors.yaml, set with SetPools), or every pod of
// the namespace while some role of the config has no selector or no
// selectors are known. A Selector, when set (the deprecated
// --worker-selector flag), limits the watch itself to the pods it picks.
type PodWorkers struct {
	Client    kubernetes.Interface
	Namespace string
	// Selector limits the watch to the pods it picks; nil watches every
	// pod of the namespace and keeps those the pools pick.
	Selector labels.Selector
	Registry *Registry
	// Log receives refusals of invalid pods; set by Run.
	log logr.Logger

	// synced is the informer's HasSynced, set once Run has built it.
	synced atomic.Pointer[func() bool]

	// mu serialises the informer's events and resyncs after a change of
	// pools, so that a resync from the store never undoes a newer event.
	mu    sync.Mutex
	store cache.Store
	// poolsOnly is set when only pods a pool picks are workers: every role
	// of the config has a pool. Unset (some role has none, or no pools are
	// known yet, or ever: a config file), every watched pod is one.
	poolsOnly bool
	// pools are the selectors a pod must match one of when not open.
	pools map[string]labels.Selector
}

// Synced reports whether the initial list has been registered; /readyz
// waits for it so that early bookings are not all unknown_worker.
func (p *PodWorkers) Synced() error {
	if f := p.synced.Load(); f == nil || !(*f)() {
		return fmt.Errorf("worker pods in %s not listed yet", p.Namespace)
	}
	return nil
}

// SetPools makes pools the roles' worker pools, in the registry and in the
// choice of pods: with open set (a role of the config has no selector),
// every watched pod is a worker; without, only those a pool picks. The
// pods already listed are registered or removed again at once.
func (p *PodWorkers) SetPools(pools map[string]labels.Selector, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Registry.SetPools(pools)
	p.pools, p.poolsOnly = pools, !open
	if p.store == nil {
		return
	}
	var specs []WorkerSpec
	for _, obj := range p.store.List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			if spec, ok := p.specOf(pod); ok {
				specs = append(specs, spec)
			}
		}
	}
	if err := p.Registry.Replace(SourcePods, specs); err != nil {
		// specOf validated each; only a duplicate name could fail.
		p.log.Error(err, "Cannot re-register worker pods after a change of worker pools")
	}
}

// wanted reports whether a pod is a worker under the pools in force.
func (p *PodWorkers) wanted(pod *corev1.Pod) bool {
	if !p.poolsOnly || p.Selector != nil {
		return true
	}
	set := labels.Set(pod.Labels)
	for _, sel := range p.pools {
		if sel.Matches(set) {
			return true
		}
	}
	return false
}

// specOf is the worker a pod registers as, and whether it is one. An
// invalid pod is logged and counted, and is not a worker.
func (p *PodWorkers) specOf(pod *corev1.Pod) (WorkerSpec, bool) {
	if !p.wanted(pod) {
		return WorkerSpec{}, false
	}
	spec, ok, err := PodWorkerSpec(pod)
	if err == nil && ok {
		err = spec.Validate()
	}
	if err != nil {
		p.Registry.countRefused(SourcePods)
		p.log.Error(err, "Ignoring worker pod", "pod", pod.Name)
		return WorkerSpec{}, false
	}
	return spec, ok
}

// Run watches the pods until ctx is done.
func (p *PodWorkers) Run(ctx context.Context, log logr.Logger) {
	sel := p.Selector
	if sel == nil {
		sel = labels.Everything()
	}
	p.log = log.WithValues("namespace", p.Namespace, "selector", sel.String())
	upsert := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		spec, ok := p.specOf(pod)
		if !ok {
			p.Registry.Delete(pod.Name)
			return
		}
		if err := p.Registry.Set(SourcePods, spec); err != nil {
			p.log.Error(err, "Ignoring worker pod", "pod", pod.Name)
			p.Registry.Delete(pod.Name)
		}
	}
	remove := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.Registry.Delete(pod.Name)
		}
	}
	lw := cache.NewFilteredListWatchFromClient(p.Client.CoreV1().RESTClient(), "pods", p.Namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    upsert,
			UpdateFunc: func(_, obj any) { upsert(obj) },
			DeleteFunc: remove,
		},
		// Without a selector the watch holds every pod of the namespace:
		// keep only what a worker is read from.
		Transform: slimPod,
	})
	p.mu.Lock()
	p.store = store
	p.mu.Unlock()
	hasSynced := ctrl.HasSynced
	p.synced.Store(&hasSynced)
	p.log.Info("Watching worker pods")
	ctrl.RunWithContext(ctx)
}

// slimPod keeps the parts of a pod PodWorkerSpec and the pools read.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, Annotations: pod.Annotations, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP},
	}, nil
}

// PodWorkerSpec reads a worker from a pod. It reports false for a pod that
// cannot take hints now and should not be registered: one being deleted,
// finished, or with a relative endpoint and no IP yet; and an error for
// annotations that cannot be read.
func PodWorkerSpec(pod *corev1.Pod) (WorkerSpec, bool, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return WorkerSpec{}, false, nil
	}
	spec := WorkerSpec{ID: pod.Name, WorkerType: pod.Annotations[AnnotationWorkerType], Labels: pod.Labels}
	for _, c := range strings.Split(pod.Annotations[AnnotationCapabilities], ",") {
		if c = strings.TrimSpace(c); c != "" {
			spec.Capabilities = append(spec.Capabilities, c)
		}
	}
	ep := strings.TrimSpace(pod.Annotations[AnnotationHintEndpoint])
	if strings.HasPrefix(ep, ":") {
		// ":8081/v1/hints": the pod template cannot know its pod's IP.
		if pod.Status.PodIP == "" {
			return WorkerSpec{}, false, nil
		}
		port, path, _ := strings.Cut(ep[1:], "/")
		ep = "http://" + net.JoinHostPort(pod.Status.PodIP, port) + "/" + path
	}
	spec.HintEndpoint = ep
	if raw := strings.TrimSpace(pod.Annotations[AnnotationSourceControlEndpoints]); raw != "" {
		if err := json.Unmarshal([]byte(raw), &spec.SourceControlEndpoints); err != nil {
			return WorkerSpec{}, false, fmt.Errorf("pod %s: annotation %s must be a JSON object from rank to endpoint, such as {\"0\": \"tcp://:23280\"}: %w",
				pod.Name, AnnotationSourceControlEndpoints, err)
		}
		for rank, sep := range spec.SourceControlEndpoints {
			// "tcp://:23280": on the pod's own IP, which the template
			// cannot know.
			scheme, rest, ok := strings.Cut(sep, "://")
			if !ok || !strings.HasPrefix(rest, ":") {
				continue
			}
			if pod.Status.PodIP == "" {
				return WorkerSpec{}, false, nil
			}
			spec.SourceControlEndpoints[rank] = scheme + "://" + net.JoinHostPort(pod.Status.PodIP, rest[1:])
		}
	}
	return spec, true, nil
}
