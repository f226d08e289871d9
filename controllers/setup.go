package controllers

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/configmaps"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/managermetrics"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// EventSource is the reporting controller of the manager's events.
const EventSource = "kvhint-manager"

// FieldOwner is the field manager of everything the manager writes with
// server-side apply.
const FieldOwner = "kvhint-manager"

// Setup registers the field indexes and both reconcilers with mgr, whose
// cache must have been built with managercache.Options(namespaces). It adds the
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
	catalogNS, err := declared.Namespaces(namespaces, o.CatalogNamespaces)
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
		catalogs: cats, catalogCache: catalogCache, graphs: graphs, rollout: rollout, loaded: loaded,
		configMaps: &configmaps.Writer{Client: mgr.GetClient(), FieldOwner: FieldOwner}}).SetupWithManager(mgr); err != nil {
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
