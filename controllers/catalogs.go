package controllers

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// CatalogForLabel and CatalogKey name a router's declared catalog (see
// v1alpha1.CatalogForLabel).
const (
	CatalogForLabel = v1alpha1.CatalogForLabel
	CatalogKey      = v1alpha1.CatalogKey
)

// CatalogCacheOptions returns the settings of the cache that holds the
// declared-catalog ConfigMaps, apart from the manager's cache, which holds
// only the ConfigMaps the manager writes: a label selector cannot say
// "either". namespaces, when not empty, limits it as CacheOptions does.
func CatalogCacheOptions(namespaces []string) cache.Options {
	hasCatalog, err := labels.NewRequirement(CatalogForLabel, selection.Exists, nil)
	if err != nil {
		panic(fmt.Sprintf("controllers: catalog label requirement: %v", err))
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.NewSelector().Add(*hasCatalog)},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// catalogs resolves the catalog each router is checked against, loading
// each declaration once per version of its ConfigMap (its schemas checked
// and its CEL compiled then, not at every reconcile), and keeps the last
// good declaration of each router for when a newer one cannot be used.
type catalogs struct {
	reader client.Reader
	linked *hints.Catalog

	mu       sync.Mutex
	loaded   map[types.UID]loadedCatalog
	lastGood map[types.NamespacedName]lastGoodCatalog
}

// lastGoodCatalog is a router's last usable declaration: its types and
// the policy-file form its build reads.
type lastGoodCatalog struct {
	cat  *hints.Catalog
	form hintsconfig.Form
}

type loadedCatalog struct {
	resourceVersion string
	cat             *declared.Catalog
	err             error
}

func newCatalogs(reader client.Reader, linked *hints.Catalog) *catalogs {
	return &catalogs{
		reader:   reader,
		linked:   linked,
		loaded:   map[types.UID]loadedCatalog{},
		lastGood: map[types.NamespacedName]lastGoodCatalog{},
	}
}

// routerCatalog is the catalog a router's roles are compiled against.
type routerCatalog struct {
	cat *hints.Catalog
	// form is the policy-file form the router's build reads: its
	// declaration's, or hintsconfig.FormPerRoleHints.
	form hintsconfig.Form
	// source names the declaration for logs, empty for the linked catalog.
	source string
	// problem, when set, says why the router's declaration cannot be used;
	// cat is then the last good declaration, or the linked catalog.
	problem *rolegraph.Finding
}

// forRouter returns the catalog of one router.
func (c *catalogs) forRouter(ctx context.Context, namespace, router string) (routerCatalog, error) {
	cms, err := c.declarations(ctx, namespace, client.MatchingLabels{CatalogForLabel: router})
	if err != nil {
		return routerCatalog{}, err
	}
	key := types.NamespacedName{Namespace: namespace, Name: router}
	c.mu.Lock()
	defer c.mu.Unlock()
	fallback := func(f rolegraph.Finding) routerCatalog {
		rc := routerCatalog{cat: c.linked, form: hintsconfig.FormPerRoleHints, problem: &f}
		if good, ok := c.lastGood[key]; ok {
			rc.cat, rc.form = good.cat, good.form
		}
		return rc
	}
	if len(cms) == 0 {
		delete(c.lastGood, key)
		return routerCatalog{cat: c.linked, form: hintsconfig.FormPerRoleHints}, nil
	}
	cat, form, problem := rolegraph.RouterCatalog(router, cms, func(cm *corev1.ConfigMap) (*hints.Catalog, hintsconfig.Form, error) {
		d, err := c.load(cm)
		if err != nil {
			return nil, "", err
		}
		return d.Catalog, d.Form, nil
	})
	if problem != nil {
		return fallback(*problem), nil
	}
	c.lastGood[key] = lastGoodCatalog{cat: cat, form: form}
	return routerCatalog{cat: cat, form: form, source: cms[0].Name}, nil
}

// declarations lists the declared-catalog ConfigMaps that match.
func (c *catalogs) declarations(ctx context.Context, namespace string, match client.MatchingLabels) ([]corev1.ConfigMap, error) {
	var list corev1.ConfigMapList
	if err := c.reader.List(ctx, &list, client.InNamespace(namespace), match); err != nil {
		return nil, fmt.Errorf("listing the declared catalogs of namespace %s: %w", namespace, err)
	}
	return list.Items, nil
}

// load reads one declaration, or returns the result of its last read when
// the ConfigMap has not changed since. Callers hold c.mu.
func (c *catalogs) load(cm *corev1.ConfigMap) (*declared.Catalog, error) {
	if l, ok := c.loaded[cm.UID]; ok && l.resourceVersion == cm.ResourceVersion {
		return l.cat, l.err
	}
	cat, err := declared.LoadConfigMap(cm)
	c.loaded[cm.UID] = loadedCatalog{resourceVersion: cm.ResourceVersion, cat: cat, err: err}
	return cat, err
}

// forget drops what was loaded from a ConfigMap that is gone.
func (c *catalogs) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.loaded, uid)
}

// forType returns the usable declarations of a namespace that declare a
// hint policy type, by router name, for a HintPolicy whose type the linked
// catalog does not hold.
func (c *catalogs) forType(ctx context.Context, namespace, hintType string) (map[string]*hints.Catalog, error) {
	cms, err := c.declarations(ctx, namespace, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*hints.Catalog{}
	for i := range cms {
		cat, err := c.load(&cms[i])
		if err != nil {
			continue
		}
		if _, ok := cat.Catalog.Hint(hintType); ok {
			out[cms[i].Labels[CatalogForLabel]] = cat.Catalog
		}
	}
	return out, nil
}

// catalogEvents maps a declared-catalog ConfigMap to the router it names:
// on an update the old and the new router both, so that a label moved to
// another router recompiles both; on a delete, what was loaded from it is
// dropped too.
func catalogEvents(c *catalogs) handler.TypedEventHandler[*corev1.ConfigMap, reconcile.Request] {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], cms ...*corev1.ConfigMap) {
		for _, cm := range cms {
			if router := cm.Labels[CatalogForLabel]; router != "" {
				q.Add(routerRequest(cm.Namespace, router))
			}
		}
	}
	return handler.TypedFuncs[*corev1.ConfigMap, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if c != nil {
				c.forget(e.Object.UID)
			}
			enqueue(q, e.Object)
		},
	}
}
