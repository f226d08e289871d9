// Package managermetrics is the manager's own Prometheus collector: the
// status of the RouterRoles in the manager's cache, read at scrape time
// (conditions, router pod counts, the compiled config's hash), and the
// declared catalogs the manager keeps loaded. It holds no series of its
// own, so none outlives the object it reports.
//
// It imports the API types, internal/dynamograph and controller-runtime's
// client; the manager's stores come in as Sources, so that it imports
// nothing of controllers.
package managermetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// Namespace prefixes the manager's own metrics (controller-runtime's keep
// their controller_runtime_, workqueue_ and rest_client_ names).
const Namespace = "kvhint_manager"

// statusListTimeout bounds one scrape's read of the cache.
const statusListTimeout = 5 * time.Second

var (
	conditionDesc = prometheus.NewDesc(Namespace+"_routerrole_condition",
		"1 when the RouterRole's condition of this type is True, 0 when it is False or Unknown; absent while the role does not carry the condition (Stalled, Reconciling and PolicyEjected are present only when True).",
		[]string{"namespace", "routerrole", "router", "role", "type"}, nil)
	podsDesc = prometheus.NewDesc(Namespace+"_router_pods",
		"A router's pods as its RouterRoles' status counts them: state total (not being deleted) and up_to_date (running the compiled config's hash); mode sidecar (a kvhint sidecar in each pod reports the hash) or restart (a Deployment or DynamoGraphDeployment opted in to restarts by the manager).",
		[]string{"namespace", "router", "mode", "state"}, nil)
	configDesc = prometheus.NewDesc(Namespace+"_router_config_info",
		"1 for the hash of the config compiled for a router (its <router>-hints ConfigMap's), to compare with the hash each sidecar runs (kvhint_router_config_info).",
		[]string{"namespace", "router", "hash"}, nil)
	catalogsDesc = prometheus.NewDesc(Namespace+"_declared_catalogs",
		"Distinct declared catalogs (ConfigMap texts) this manager replica keeps loaded or is loading, each counted once however many ConfigMaps hold it.",
		nil, nil)
	catalogBytesDesc = prometheus.NewDesc(Namespace+"_declared_catalog_bytes",
		"The estimated memory of the declared catalogs this manager replica keeps, as its catalog budget counts it (--catalog-max-memory-total bounds it).",
		nil, nil)
	rolesDesc = prometheus.NewDesc(Namespace+"_routerroles",
		"RouterRoles in the manager's cache. A manager that is not the leader reports 0 and no status series: the leader reports them.",
		nil, nil)
)

// statusCollector exports the status of the RouterRoles in the manager's
// cache at scrape time, the way kube-state-metrics exports the status of
// built-in objects: alerts on Programmed need it, and a collector that
// reads the cache holds no series of its own that could outlive a role.
// Its series are bounded by the RouterRoles times their seven condition
// types, plus three per router.
//
// Only the leader exports the status series: every replica would report
// the same status and fire every alert once per replica.
type statusCollector struct{ Sources }

// Sources are what the collector reads.
type Sources struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Elected is closed once the replica leads (manager.Manager's
	// Elected; a closed channel without leader election): the status
	// series are exported from then on.
	Elected <-chan struct{}
	// Graphs returns the reader of DynamoGraphDeployments, nil while the
	// manager does not watch them (yet); nil: never.
	Graphs func() client.Reader
	// Catalogs is the manager's store of declared catalogs; nil when it
	// has none. Every replica exports it: each keeps its own.
	Catalogs interface{ Loaded() (n int, bytes int64) }
}

// NewCollector returns the collector of the manager's own metrics.
func NewCollector(s Sources) prometheus.Collector {
	return &statusCollector{s}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- conditionDesc
	ch <- podsDesc
	ch <- configDesc
	ch <- rolesDesc
	ch <- catalogsDesc
	ch <- catalogBytesDesc
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Catalogs != nil {
		n, bytes := c.Catalogs.Loaded()
		ch <- prometheus.MustNewConstMetric(catalogsDesc, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(catalogBytesDesc, prometheus.GaugeValue, float64(bytes))
	}
	select {
	case <-c.Elected:
	default:
		ch <- prometheus.MustNewConstMetric(rolesDesc, prometheus.GaugeValue, 0)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusListTimeout)
	defer cancel()
	var roles v1alpha1.RouterRoleList
	if err := c.Reader.List(ctx, &roles); err != nil {
		ch <- prometheus.NewInvalidMetric(conditionDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(rolesDesc, prometheus.GaugeValue, float64(len(roles.Items)))
	type routerKey struct{ namespace, router string }
	pods := map[routerKey]*v1alpha1.RouterPods{}
	for i := range roles.Items {
		rr := &roles.Items[i]
		for _, cond := range rr.Status.Conditions {
			v := 0.0
			if cond.Status == metav1.ConditionTrue {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(conditionDesc, prometheus.GaugeValue, v,
				rr.Namespace, rr.Name, rr.Spec.Router, string(rr.Spec.Role), cond.Type)
		}
		// Every role of a router carries the same count; one is exported.
		if p := rr.Status.RouterPods; p != nil {
			pods[routerKey{rr.Namespace, rr.Spec.Router}] = p
		}
	}
	if len(pods) == 0 {
		return
	}
	// A router is restart-mode when one of its Deployments or
	// DynamoGraphDeployments opted in, as the reconciler decides
	// (workload.Rollout.List).
	var deps appsv1.DeploymentList
	if err := c.Reader.List(ctx, &deps, client.HasLabels{v1alpha1.RouterLabel}); err != nil {
		ch <- prometheus.NewInvalidMetric(podsDesc, err)
		return
	}
	restart := map[routerKey]bool{}
	for i := range deps.Items {
		d := &deps.Items[i]
		if v1alpha1.OptedIn(d.Annotations) {
			restart[routerKey{d.Namespace, d.Labels[v1alpha1.RouterLabel]}] = true
		}
	}
	if rd := c.graphs(); rd != nil {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(dynamograph.GroupVersion.WithKind(dynamograph.Kind + "List"))
		if err := rd.List(ctx, list, client.HasLabels{v1alpha1.RouterLabel}); err != nil {
			ch <- prometheus.NewInvalidMetric(podsDesc, err)
			return
		}
		for _, g := range list.Items {
			if v1alpha1.GraphOptedIn(g.GetAnnotations()) {
				restart[routerKey{g.GetNamespace(), g.GetLabels()[v1alpha1.RouterLabel]}] = true
			}
		}
	}
	for k, p := range pods {
		mode := "sidecar"
		if restart[k] {
			mode = "restart"
		}
		ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(p.Total), k.namespace, k.router, mode, "total")
		ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(p.UpToDate), k.namespace, k.router, mode, "up_to_date")
		if p.Hash != "" {
			ch <- prometheus.MustNewConstMetric(configDesc, prometheus.GaugeValue, 1, k.namespace, k.router, p.Hash)
		}
	}
}

// graphs returns the reader of DynamoGraphDeployments, or nil.
func (c *statusCollector) graphs() client.Reader {
	if c.Graphs == nil {
		return nil
	}
	return c.Graphs()
}
