package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/managermetrics"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// EventSource is the reporting controller of the manager's events.
const EventSource = "kvhint-manager"

// CacheOptions returns the cache settings the reconcilers are written for.
// ConfigMaps and Pods are cached only when they carry the router label (and
// ConfigMaps only when the manager wrote them), so the manager's memory
// follows the number of routers, not the size of the cluster. namespaces,
// when not empty, limits every watch to those namespaces.
func CacheOptions(namespaces []string) cache.Options {
	hasRouter, err := labels.NewRequirement(v1alpha1.RouterLabel, selection.Exists, nil)
	if err != nil {
		panic(fmt.Sprintf("controllers: router label requirement: %v", err))
	}
	managed, err := labels.NewRequirement(v1alpha1.ManagedByLabel, selection.Equals, []string{v1alpha1.ManagedBy})
	if err != nil {
		panic(fmt.Sprintf("controllers: managed-by label requirement: %v", err))
	}
	opts := cache.Options{
		// Nothing reads managedFields from the cache; server-side apply
		// makes them large.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.NewSelector().Add(*hasRouter, *managed)},
			&corev1.Pod{}:       {Label: labels.NewSelector().Add(*hasRouter), Transform: trimPod},
			// Restart-mode routers' workloads and their revision history.
			&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*hasRouter)},
			&appsv1.ReplicaSet{}: {Label: labels.NewSelector().Add(*hasRouter), Transform: trimReplicaSet},
		},
		// Watches that wait out an API server outage, trying again every
		// 2 s: with client-go's own backoff (up to 30 s and as much jitter
		// again) a change made after a 30 s outage waited 20 to 39 s more
		// (test/fault TestAPIServerOutage).
		NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(apiwatch.Patient(context.Background(), lw), obj, resync, idx)
		},
	}
	// Namespaced ByObject entries inherit these.
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// trimPod keeps of a cached router pod what Programmed and PolicyEjected
// read: metadata, phase, the Ready condition and which ConfigMaps its
// volumes reference (for restart-mode routers). Router pods carry large
// specs (the router's own containers); the manager needs none of the rest.
//
// It also drops a sidecar report annotation (applied-hash,
// ejected-policies) that the sidecar's field manager does not own (see
// sidecarOwns), so that the status counts only what a sidecar reported.
// Of the managedFields it keeps the entry that shows the sidecar's
// ownership, and nothing else: client-go may run a transform again on an
// object it already transformed (a resync, a relist after the API server
// came back), and without that entry the second run would take the
// sidecar's own report for someone else's (test/fault
// TestAPIServerOutage: a router whose config did not change fell to 0/1
// after an outage).
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta}
	trimmed.ManagedFields = nil
	for _, mf := range pod.ManagedFields {
		if slices.ContainsFunc(sidecarReports, func(key string) bool { return sidecarOwns(mf, key) }) {
			trimmed.ManagedFields = append(trimmed.ManagedFields, mf)
		}
	}
	cloned := false
	for _, key := range sidecarReports {
		if _, ok := pod.Annotations[key]; !ok || slices.ContainsFunc(trimmed.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool { return sidecarOwns(mf, key) }) {
			continue
		}
		if !cloned {
			trimmed.Annotations, cloned = maps.Clone(pod.Annotations), true
		}
		delete(trimmed.Annotations, key)
	}
	trimmed.Status.Phase = pod.Status.Phase
	// What a rollout's measurement reads: where the sidecar's ops port
	// is.
	trimmed.Status.PodIP = pod.Status.PodIP
	trimmed.Spec.Containers = opsPorts(pod.Spec.Containers)
	trimmed.Spec.InitContainers = opsPorts(pod.Spec.InitContainers)
	// What a restart-mode router's count reads: which config revision
	// the pod mounts, and whether it is Ready.
	trimmed.Spec.Volumes = configMapVolumes(pod.Spec.Volumes)
	// Since when, and, for a staged rollout's candidate pod, whether its
	// containers restarted and how they stand.
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			trimmed.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		trimmed.Status.ContainerStatuses = append(trimmed.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, RestartCount: cs.RestartCount, State: cs.State, LastTerminationState: cs.LastTerminationState,
		})
	}
	return trimmed, nil
}

// sidecarReports are the annotations a sidecar writes on its own pod.
var sidecarReports = []string{v1alpha1.AppliedHashAnnotation, v1alpha1.EjectedPoliciesAnnotation, rolloutapi.ConfigStatusAnnotation}

// OpsPortName is the name of the sidecar container's port that serves
// its ops routes, rolloutapi.OutcomesPath among them.
const OpsPortName = provider.OpsPortName

// opsPorts keeps of containers the name and the ports named OpsPortName
// of those that have one.
func opsPorts(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.Name == OpsPortName {
				out = append(out, corev1.Container{Name: c.Name, Ports: []corev1.ContainerPort{p}})
			}
		}
	}
	return out
}

// trimReplicaSet keeps of a cached ReplicaSet what config revision
// garbage collection reads: its metadata and the ConfigMaps its pod
// template mounts.
func trimReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil
	}
	trimmed := &appsv1.ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: rs.ObjectMeta}
	trimmed.Spec.Template.Spec.Volumes = configMapVolumes(rs.Spec.Template.Spec.Volumes)
	return trimmed, nil
}

// configMapVolumes returns the configMap volumes, with their name and the
// ConfigMap they reference and nothing else.
func configMapVolumes(vols []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range vols {
		if v.ConfigMap != nil {
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: v.ConfigMap.LocalObjectReference},
			}})
		}
	}
	return out
}

// sidecarOwns reports whether a managedFields entry shows the annotation
// key owned by the sidecar's field manager (v1alpha1.SidecarFieldManager).
// A value that kubectl annotate, another controller or a pod template set
// is owned by them instead, and is not a sidecar's report. This is a check
// of provenance, not of authority: a client that names itself
// "kvhint-sidecar" passes it. What makes the name trustworthy is the
// admission policy in config/admission, which lets only a pod's own
// sidecar write the annotations at all.
func sidecarOwns(mf metav1.ManagedFieldsEntry, key string) bool {
	if mf.Manager != v1alpha1.SidecarFieldManager || mf.Subresource != "" || mf.FieldsV1 == nil {
		return false
	}
	var fields struct {
		Metadata struct {
			Annotations map[string]json.RawMessage `json:"f:annotations"`
		} `json:"f:metadata"`
	}
	if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
		return false
	}
	_, ok := fields.Metadata.Annotations["f:"+key]
	return ok
}

// Setup registers the field indexes and both reconcilers with mgr, whose
// cache must have been built with CacheOptions(namespaces). It adds the
// cache of declared-catalog ConfigMaps (declared.CacheOptions) to mgr.
func Setup(ctx context.Context, mgr manager.Manager, cat *hints.Catalog, namespaces ...string) error {
	return SetupWithOptions(ctx, mgr, cat, Options{Namespaces: namespaces, CatalogLimits: DefaultCatalogLimits()})
}

// DefaultCatalogLimits are the manager's shipped limits of declared
// catalogs (declared.DefaultLimits).
func DefaultCatalogLimits() declared.Limits { return declared.DefaultLimits() }

// Options are the manager's settings of the reconcilers.
type Options struct {
	// Namespaces, when not empty, limits the routers, HintPolicies and
	// declared catalogs read to these namespaces.
	Namespaces []string
	// CatalogNamespaces, when not empty, limits the declared catalogs
	// read to these namespaces (within Namespaces when both are set): a
	// router elsewhere is compiled against the linked catalog.
	CatalogNamespaces []string
	// CatalogLimits bound what declared catalogs may cost.
	CatalogLimits declared.Limits
	// GraphDiscoveryInterval is how often the manager looks for the
	// DynamoGraphDeployment CRD until it is served; zero is
	// DefaultGraphDiscoveryInterval.
	GraphDiscoveryInterval time.Duration
	// RolloutAnalysis takes the measurements of RouterRollouts' steps
	// (RolloutReconciler); nil is rollout.NewJudge with the default
	// sidecar provider options (no loopback pod IPs).
	RolloutAnalysis rollout.Analysis
}

// ManagerMetricsNamespace prefixes the manager's own metrics
// (managermetrics.Namespace).
const ManagerMetricsNamespace = managermetrics.Namespace

// RegisterMetrics registers the manager's own metrics, read from mgr's
// cache and stores, in reg (controller-runtime's metrics.Registry in the
// manager, so that they are served with controller-runtime's on the same
// endpoint).
func RegisterMetrics(reg prometheus.Registerer, mgr manager.Manager) error {
	s := managermetrics.Sources{Reader: mgr.GetCache(), Elected: mgr.Elected()}
	if g, ok := graphWatches.Load(mgr); ok {
		s.Graphs = g.(*workload.GraphWatch).Reader
	}
	if cats, ok := catalogStores.Load(mgr); ok {
		s.Catalogs = cats.(*declared.Store)
	}
	return reg.Register(managermetrics.NewCollector(s))
}

// DefaultGraphDiscoveryInterval is how often the manager looks for the
// DynamoGraphDeployment CRD until it is served.
const DefaultGraphDiscoveryInterval = 10 * time.Second

// graphWatches holds each manager's DynamoGraphDeployment watch, for its
// metrics (RegisterMetrics).
var graphWatches sync.Map

// catalogStores holds each manager's store of declared catalogs, for its
// metrics (RegisterMetrics).
var catalogStores sync.Map

// SetupWithOptions is Setup with all the settings.
func SetupWithOptions(ctx context.Context, mgr manager.Manager, cat *hints.Catalog, o Options) error {
	namespaces := o.Namespaces
	catalogNS, err := catalogNamespaces(namespaces, o.CatalogNamespaces)
	if err != nil {
		return err
	}
	if err := setupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("field indexes: %w", err)
	}
	opts := declared.CacheOptions(catalogNS)
	opts.Scheme, opts.Mapper = mgr.GetScheme(), mgr.GetRESTMapper()
	catalogCache, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return fmt.Errorf("declared-catalog cache: %w", err)
	}
	if err := mgr.Add(catalogCache); err != nil {
		return fmt.Errorf("declared-catalog cache: %w", err)
	}
	cats := declared.NewStore(catalogCache, cat, o.CatalogLimits, catalogNS...)
	catalogStores.Store(mgr, cats)
	loaded := cats.LoadInBackground(ctx)
	rec := mgr.GetEventRecorder(EventSource)
	graphs := &workload.GraphWatch{Config: mgr.GetConfig(), Namespaces: namespaces, Interval: cmp.Or(o.GraphDiscoveryInterval, DefaultGraphDiscoveryInterval)}
	graphWatches.Store(mgr, graphs)
	rollout := &workload.Rollout{Client: mgr.GetClient(), FieldOwner: FieldOwner, Writers: []workload.Writer{
		&workload.Deployments{Client: mgr.GetClient(), Recorder: rec},
		&workload.Graphs{Client: mgr.GetClient(), Recorder: rec, Watch: graphs},
	}}
	if err := (&RouterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Catalog: cat, Recorder: rec,
		catalogs: cats, catalogCache: catalogCache, graphs: graphs, rollout: rollout, loaded: loaded}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("router controller: %w", err)
	}
	if err := (&RolloutReconciler{Client: mgr.GetClient(), Recorder: rec, Analysis: rolloutAnalysis(o)}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("rollout controller: %w", err)
	}
	if err := (&HintPolicyReconciler{Client: mgr.GetClient(), Catalog: cat, Recorder: rec,
		catalogs: cats, catalogCache: catalogCache}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("hintpolicy controller: %w", err)
	}
	return nil
}

// rolloutAnalysis is the analysis of o, or the default one.
func rolloutAnalysis(o Options) rollout.Analysis {
	if o.RolloutAnalysis != nil {
		return o.RolloutAnalysis
	}
	return rollout.NewJudge(provider.SidecarOptions{}, provider.PrometheusOptions{})
}

// catalogNamespaces returns the namespaces declared catalogs are read
// from: the manager's, narrowed to the chosen ones; none for all.
func catalogNamespaces(namespaces, chosen []string) ([]string, error) {
	if len(chosen) == 0 {
		return namespaces, nil
	}
	if len(namespaces) == 0 {
		return chosen, nil
	}
	var out []string
	for _, ns := range chosen {
		if slices.Contains(namespaces, ns) {
			out = append(out, ns)
		} else {
			return nil, fmt.Errorf("--catalog-namespace %s: not a namespace the manager watches (--namespace %s)", ns, strings.Join(namespaces, ","))
		}
	}
	return out, nil
}

// NewScheme returns a scheme with the Kubernetes built-in types and this
// project's API.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}
