package router

import (
	"context"
	"fmt"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
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
	// Key is the data key; empty means ConfigMapKey.
	Key string
	// OnWorkerSelectors, when set, receives the roles' worker selectors
	// (key WorkerSelectorsKey) after every load of the config: nil when
	// the ConfigMap has no such key. A key that does not parse is logged
	// and skipped, leaving the pools in force.
	OnWorkerSelectors func(map[string]labels.Selector)
}

// Run loads the ConfigMap into d on every change until ctx is done. A
// deleted ConfigMap or a missing key leaves the config in force.
func (s ConfigMapSource) Run(ctx context.Context, d *core.Dispatcher, log logr.Logger) {
	key := s.Key
	if key == "" {
		key = ConfigMapKey
	}
	origin := fmt.Sprintf("configmap %s/%s key %s", s.Namespace, s.Name, key)
	log = log.WithValues("configmap", s.Namespace+"/"+s.Name)
	apply := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		data, ok := cm.Data[key]
		if !ok {
			d.RecordSourceError(origin, fmt.Errorf("%w: the ConfigMap has no key %s", core.ErrConfigRejected, key))
			return
		}
		_ = d.Load([]byte(data), origin)
		if s.OnWorkerSelectors == nil {
			return
		}
		raw, ok := cm.Data[WorkerSelectorsKey]
		if !ok {
			s.OnWorkerSelectors(nil)
			return
		}
		pools, err := ParseWorkerSelectors([]byte(raw))
		if err != nil {
			log.Error(err, "Cannot read the roles' worker selectors; keeping the worker pools in force", "key", WorkerSelectorsKey)
			return
		}
		s.OnWorkerSelectors(pools)
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
				d.RecordSourceError(origin, fmt.Errorf("%w: the ConfigMap was deleted", core.ErrConfigRejected))
			},
		},
	})
	log.Info("Watching hints ConfigMap", "key", key)
	ctrl.RunWithContext(ctx)
}

// ParseWorkerSelectors reads the WorkerSelectorsKey of a compiled
// ConfigMap: a YAML map from role to its label selector.
func ParseWorkerSelectors(data []byte) (map[string]labels.Selector, error) {
	var m map[string]*metav1.LabelSelector
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", WorkerSelectorsKey, err)
	}
	out := make(map[string]labels.Selector, len(m))
	for role, ls := range m {
		if ls == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return nil, fmt.Errorf("%s: role %s: %w", WorkerSelectorsKey, role, err)
		}
		out[role] = sel
	}
	return out, nil
}
