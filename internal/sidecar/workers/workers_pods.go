package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// PodWorkers keeps the registry's pod workers in step with the worker pods
// of one namespace. A pod's ID is its name; its capabilities, hint
// endpoint, worker type and source endpoints come from its annotations,
// its pools from its labels. Pods without router_hint are registered too,
// so that their bookings are counted as not_hint_capable rather than
// unknown_worker.
//
// Which pods: the union of the roles' worker selectors (the compiled
// ConfigMap's roles.yaml, set with SetPools) and, while a rollout stages
// a candidate, of the candidate's (SetCandidatePools), or every pod of
// the namespace while some role of either config has no selector or no
// selectors are known. The watch asks the API server for the pods that
// match what all the pools require alike (their common requirements), and
// keeps those that match one pool. A Selector, when set (the deprecated
// --worker-selector flag), is the watch's selector instead.
type PodWorkers struct {
	Client    kubernetes.Interface
	Namespace string
	// Selector limits the watch to the pods it picks; nil watches every
	// pod of the namespace and keeps those the pools pick.
	Selector labels.Selector
	Registry *Registry
	// Log receives refusals of invalid pods; set by Run.
	log logr.Logger
	// AllowAbsoluteEndpoints takes absolute hint endpoint URLs from pod
	// annotations; by default only ":PORT/PATH" on the pod's IP is.
	AllowAbsoluteEndpoints bool

	// listed is set once the first watch has listed the pods.
	listed atomic.Bool
	// restart asks Run for a watch with the selector of new pools.
	restart chan struct{}
	// watching is the selector of the running watch, and storeListed
	// whether it has listed the pods into store; guarded by mu.
	watching    string
	storeListed bool

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
	// candPools are a staged candidate's, nil while none is staged;
	// candOpen is set when a role of the candidate has no selector.
	candPools map[string]labels.Selector
	candOpen  bool
}

// Synced reports whether the initial list has been registered; /readyz
// waits for it so that early bookings are not all unknown_worker.
func (p *PodWorkers) Synced() error {
	if !p.listed.Load() {
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
	p.repickLocked()
}

// SetCandidatePools makes pools a staged candidate's worker pools, in the
// registry (Registry.SetCandidatePools) and in the choice of pods: the
// pods its pools pick are workers too, so that a candidate that moves a
// role to other pods finds them registered; open is set when one of its
// roles has no selector. Nil pools drop them when no candidate is staged.
func (p *PodWorkers) SetCandidatePools(pools map[string]labels.Selector, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Registry.SetCandidatePools(pools)
	p.candPools, p.candOpen = pools, open && pools != nil
	p.repickLocked()
}

// repickLocked registers the listed pods again under the pools in force,
// and restarts the watch when its selector changes. Guarded by mu.
func (p *PodWorkers) repickLocked() {
	p.resyncLocked()
	if p.restart != nil && p.watchSelector().String() != p.watching {
		select {
		case p.restart <- struct{}{}:
		default:
		}
	}
}

// onlyPooled reports whether only the pods a pool picks are workers: no
// role of the stable config or of a staged candidate takes any pod.
// Guarded by mu.
func (p *PodWorkers) onlyPooled() bool { return p.poolsOnly && !p.candOpen }

// selectors are the pools' selectors, the stable config's and a staged
// candidate's, in a fixed order. Guarded by mu.
func (p *PodWorkers) selectors() []labels.Selector {
	var out []labels.Selector
	for _, pools := range []map[string]labels.Selector{p.pools, p.candPools} {
		roles := slices.Sorted(maps.Keys(pools))
		for _, r := range roles {
			out = append(out, pools[r])
		}
	}
	return out
}

// wanted reports whether a pod is a worker under the pools in force.
func (p *PodWorkers) wanted(pod *corev1.Pod) bool {
	if !p.onlyPooled() || p.Selector != nil {
		return true
	}
	set := labels.Set(pod.Labels)
	for _, sel := range p.selectors() {
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
	spec, ok, err := PodWorkerSpec(pod, p.AllowAbsoluteEndpoints)
	if err == nil && ok {
		err = p.Registry.check(&spec) // the registry's endpoint rules too
	}
	if err != nil {
		p.Registry.countRefused(SourcePods)
		p.log.Error(err, "Ignoring worker pod", "pod", pod.Name)
		return WorkerSpec{}, false
	}
	return spec, ok
}

// watchSelector is the label selector of the pod watch: the Selector when
// set; else, when only pooled pods are workers, the requirements every
// pool shares (app.kubernetes.io/name=llama for pools that differ only in
// their component), so that the API server sends only pods of the union's
// neighbourhood; else every pod of the namespace. Guarded by mu.
func (p *PodWorkers) watchSelector() labels.Selector {
	if p.Selector != nil {
		return p.Selector
	}
	sels := p.selectors()
	if !p.onlyPooled() || len(sels) == 0 {
		return labels.Everything()
	}
	var common []labels.Requirement
	for i, sel := range sels {
		reqs, selectable := sel.Requirements()
		if !selectable {
			return labels.Everything()
		}
		if i == 0 {
			common = slices.Clone(reqs) // Requirements shares the selector's own slice
			continue
		}
		common = slices.DeleteFunc(common, func(c labels.Requirement) bool {
			return !slices.ContainsFunc(reqs, func(q labels.Requirement) bool { return q.String() == c.String() })
		})
	}
	return labels.NewSelector().Add(common...)
}

// resyncLocked registers the pods of the store that are workers now and
// removes the others. Guarded by mu.
func (p *PodWorkers) resyncLocked() {
	if p.store == nil || !p.storeListed {
		// The watch's own listing resyncs when it completes.
		return
	}
	var specs []WorkerSpec
	for _, obj := range p.store.List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			spec, ok := p.specOf(pod)
			switch {
			case ok && p.Registry.HeldByOther(SourcePods, spec.ID):
				p.log.Error(fmt.Errorf("worker %s is %w", spec.ID, ErrOtherSource), "Ignoring worker pod", "pod", pod.Name)
			case ok:
				specs = append(specs, spec)
			}
		}
	}
	if err := p.Registry.Replace(SourcePods, specs); err != nil {
		// specOf validated each; only a duplicate name, or a worker
		// another source registered since, could fail.
		p.log.Error(err, "Cannot re-register worker pods")
	}
}

// Run watches the pods until ctx is done. When a change of pools changes
// the watch's selector, the watch restarts with the new one; the pods it
// no longer sees leave the registry once it has listed.
func (p *PodWorkers) Run(ctx context.Context, log logr.Logger) {
	p.mu.Lock()
	p.log = log.WithValues("namespace", p.Namespace)
	if p.restart == nil {
		p.restart = make(chan struct{}, 1)
	}
	p.mu.Unlock()
	upsert := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		spec, ok := p.specOf(pod)
		if !ok {
			_ = p.Registry.Delete(SourcePods, pod.Name) // only a pod's own worker; none is fine
			return
		}
		if err := p.Registry.Set(SourcePods, spec); err != nil {
			p.log.Error(err, "Ignoring worker pod", "pod", pod.Name)
			_ = p.Registry.Delete(SourcePods, pod.Name) // only a pod's own worker; none is fine
		}
	}
	remove := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			p.mu.Lock()
			defer p.mu.Unlock()
			_ = p.Registry.Delete(SourcePods, pod.Name) // only a pod's own worker; none is fine
		}
	}
	for {
		p.mu.Lock()
		sel := p.watchSelector()
		p.watching = sel.String()
		p.mu.Unlock()
		wctx, cancel := context.WithCancel(ctx)
		lw := cache.NewFilteredListWatchFromClient(p.Client.CoreV1().RESTClient(), "pods", p.Namespace,
			func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
		store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: apiwatch.Patient(wctx, lw),
			ObjectType:    &corev1.Pod{},
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    upsert,
				UpdateFunc: func(_, obj any) { upsert(obj) },
				DeleteFunc: remove,
			},
			// The watch may hold every pod of the namespace: keep only
			// what a worker is read from.
			Transform: slimPod,
		})
		p.mu.Lock()
		p.store, p.storeListed = store, false
		p.mu.Unlock()
		done := make(chan struct{})
		go func() { defer close(done); ctrl.RunWithContext(wctx) }()
		go func() {
			if cache.WaitForCacheSync(wctx.Done(), ctrl.HasSynced) {
				p.mu.Lock()
				if p.store == store {
					p.storeListed = true
					p.resyncLocked()
				}
				p.mu.Unlock()
				p.listed.Store(true)
			}
		}()
		p.log.Info("Watching worker pods", "selector", sel.String())
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return
		case <-p.restart:
			cancel()
			<-done
		}
	}
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
// annotations that cannot be read. The hint endpoint annotation is a port
// and a path on the pod's own IP (":8081/v1/hints"); an absolute URL is an
// error unless allowAbsolute, so that no annotation can make the sidecar
// post to another host, its own loopback included.
func PodWorkerSpec(pod *corev1.Pod, allowAbsolute bool) (WorkerSpec, bool, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return WorkerSpec{}, false, nil
	}
	spec := WorkerSpec{ID: pod.Name, WorkerType: pod.Annotations[wellknown.WorkerTypeAnnotation], Labels: pod.Labels}
	for _, c := range strings.Split(pod.Annotations[wellknown.CapabilitiesAnnotation], ",") {
		if c = strings.TrimSpace(c); c != "" {
			spec.Capabilities = append(spec.Capabilities, c)
		}
	}
	if ep := strings.TrimSpace(pod.Annotations[wellknown.HintEndpointAnnotation]); ep != "" {
		if strings.HasPrefix(ep, ":") && pod.Status.PodIP == "" {
			// The pod template cannot know its pod's IP: wait for it.
			return WorkerSpec{}, false, nil
		}
		url, err := endpoint.PodHintEndpoint(pod.Status.PodIP, ep, allowAbsolute)
		if err != nil {
			return WorkerSpec{}, false, fmt.Errorf("worker pod %s: %w", pod.Name, err)
		}
		spec.HintEndpoint = url
	}
	if raw := strings.TrimSpace(pod.Annotations[wellknown.SourceControlEndpointsAnnotation]); raw != "" {
		if err := json.Unmarshal([]byte(raw), &spec.SourceControlEndpoints); err != nil {
			return WorkerSpec{}, false, fmt.Errorf("pod %s: annotation %s must be a JSON object from rank to endpoint, such as {\"0\": \"tcp://:23280\"}: %w",
				pod.Name, wellknown.SourceControlEndpointsAnnotation, err)
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
	if err := podTopology(pod, &spec); err != nil {
		return WorkerSpec{}, false, err
	}
	return spec, true, nil
}

// Where Dynamo's operator puts a worker pod's topology when a DGD sets
// spec.experimental.kvTransferPolicy: its topology-label controller copies
// the node's labels onto the scheduled pod, under
// nvidia.com/dynamo-topology.<domain> for each level of a Grove
// ClusterTopology (clusterTopologyName), or under the node label's own key,
// which the pod's nvidia.com/topology-label-key annotation names
// (labelKey; the domain's name is then the policy's domain, which the pod
// carries only in its environment, so the sidecar takes it from the
// kv-transfer-domain annotation).
const (
	dynamoTopologyLabelPrefix        = "nvidia.com/dynamo-topology."
	dynamoTopologyLabelKeyAnnotation = "nvidia.com/topology-label-key"
)

// podTopology reads a worker pod's topology domains and KV transfer
// policy: Dynamo's topology labels, then the TopologyDomainsAnnotation
// (which wins for a domain both name), the transfer domain, enforcement
// and preferred weight annotations.
func podTopology(pod *corev1.Pod, spec *WorkerSpec) error {
	domains := map[string]string{}
	for k, v := range pod.Labels {
		if name, ok := strings.CutPrefix(k, dynamoTopologyLabelPrefix); ok && v != "" {
			domains[name] = v
		}
	}
	spec.KVTransferDomain = strings.TrimSpace(pod.Annotations[wellknown.KVTransferDomainAnnotation])
	spec.KVTransferEnforcement = strings.TrimSpace(pod.Annotations[wellknown.KVTransferEnforcementAnnotation])
	if key := strings.TrimSpace(pod.Annotations[dynamoTopologyLabelKeyAnnotation]); key != "" && spec.KVTransferDomain != "" {
		if v := pod.Labels[key]; v != "" {
			domains[spec.KVTransferDomain] = v
		}
	}
	if raw := strings.TrimSpace(pod.Annotations[wellknown.TopologyDomainsAnnotation]); raw != "" {
		var own map[string]string
		if err := json.Unmarshal([]byte(raw), &own); err != nil {
			return fmt.Errorf("pod %s: annotation %s must be a JSON object from a topology domain to the pod's value in it, such as {\"zone\": \"us-east-1a\"}: %w",
				pod.Name, wellknown.TopologyDomainsAnnotation, err)
		}
		maps.Copy(domains, own)
	}
	if len(domains) > 0 {
		spec.TopologyDomains = domains
	}
	if raw := strings.TrimSpace(pod.Annotations[wellknown.KVTransferPreferredWeightAnnotation]); raw != "" {
		w, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("pod %s: annotation %s is %q: want a number in [0, 1]", pod.Name, wellknown.KVTransferPreferredWeightAnnotation, raw)
		}
		spec.KVTransferPreferredWeight = &w
	}
	return nil
}
