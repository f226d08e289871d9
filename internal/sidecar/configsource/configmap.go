package configsource

import (
	"context"
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/router"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
)

// ConfigMapSource loads the hints config from a ConfigMap through a watch
// limited to that one object (a field selector on its name), so the sidecar
// needs get/list/watch on ConfigMaps in its namespace and sees no other.
// It reloads within a watch round-trip of a change, without waiting for
// kubelet to refresh a mounted volume.
type ConfigMapSource struct {
	Client    kubernetes.Interface
	Namespace string
	// Name is the ConfigMap's name, <router>-hints.
	Name string
	// OnWorkerSelectors, when set, receives the roles' worker selectors
	// (from the role settings, wellknown.RolesKey) after every successful load of
	// the config, and only then: a role without a selector is absent.
	OnWorkerSelectors func(map[string]labels.Selector)
}

// Run loads the ConfigMap into d on every change until ctx is done. A
// deleted ConfigMap or a missing key leaves the config in force.
func (s ConfigMapSource) Run(ctx context.Context, d *router.Dispatcher, log logr.Logger) {
	origin := fmt.Sprintf("configmap %s/%s", s.Namespace, s.Name)
	log = log.WithValues("configmap", s.Namespace+"/"+s.Name)
	apply := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		loadCompiled(d, cm.Data, origin, s.OnWorkerSelectors)
	}
	lw := cache.NewFilteredListWatchFromClient(s.Client.CoreV1().RESTClient(), "configmaps", s.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.Name).String()
		})
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: apiwatch.Patient(ctx, lw),
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    apply,
			UpdateFunc: func(_, obj any) { apply(obj) },
			DeleteFunc: func(any) {
				d.RecordSourceError(origin, fmt.Errorf("%w: the ConfigMap was deleted", router.ErrConfigRejected))
			},
		},
	})
	log.Info("Watching hints ConfigMap")
	ctrl.RunWithContext(ctx)
}

// loadCompiled loads a compiled ConfigMap's data (from the API or a
// mounted directory): the policy file under each role's router mode, and,
// only when that load succeeds, the roles' worker pools. A config and its
// pools are one unit: a malformed role settings key, or a refused policy
// file, keeps both as they were.
func loadCompiled(d *router.Dispatcher, data map[string]string, origin string, onPools func(map[string]labels.Selector)) {
	dec, err := compiled.Decode(data)
	if err != nil {
		d.RecordSourceError(origin, fmt.Errorf("%w: %w", router.ErrConfigRejected, err))
		return
	}
	if err := d.LoadConfig(router.Config{Doc: dec.Policy, Modes: dec.Modes(), Hash: dec.Hash}, origin); err != nil {
		return // logged and counted by LoadConfig
	}
	if onPools != nil {
		onPools(dec.Selectors)
	}
}
