package rolegraph

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
)

// configMap is the ConfigMap that carries a router's compiled config, in
// the format of package compiled.
//
// Every RouterRole that names the router owns it, whether or not its entry
// runs, so that garbage collection removes the ConfigMap with the last of
// them and not before. None is its controller: several objects own it
// alike, and a controller reference admits only one.
func configMap(router string, results []*roleResult, data map[string]string, hash string, sources map[string]compiled.Source) *corev1.ConfigMap {
	owners := make([]metav1.OwnerReference, 0, len(results))
	for _, res := range results {
		owners = append(owners, metav1.OwnerReference{
			APIVersion: v1alpha1.GroupVersion.String(),
			Kind:       "RouterRole",
			Name:       res.rr.Name,
			UID:        res.rr.UID,
		})
	}
	slices.SortFunc(owners, func(a, b metav1.OwnerReference) int { return strings.Compare(a.Name, b.Name) })

	var ns string
	if len(results) > 0 {
		ns = results[0].rr.Namespace
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1alpha1.HintsConfigMapName(router),
			Namespace: ns,
			Labels: map[string]string{
				v1alpha1.RouterLabel:    router,
				v1alpha1.ManagedByLabel: v1alpha1.ManagedBy,
			},
			Annotations: map[string]string{
				v1alpha1.HashAnnotation:    hash,
				compiled.SourcesAnnotation: compiled.EncodeSources(sources),
			},
			OwnerReferences: owners,
		},
		Data: data,
	}
}

// CreatedByManager reports whether a ConfigMap named "<router>-hints" is
// one the manager wrote: it carries the managed-by label the manager sets,
// or an owner reference to a RouterRole. Either mark alone is enough, so a
// compiled ConfigMap whose labels were edited away is still repaired. A
// ConfigMap with neither is someone else's that happens to have the name;
// the manager never writes to it, reads last good entries from it, or
// deletes it.
func CreatedByManager(cm *corev1.ConfigMap) bool {
	if cm.Labels[v1alpha1.ManagedByLabel] == v1alpha1.ManagedBy {
		return true
	}
	for _, o := range cm.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err == nil && gv.Group == v1alpha1.GroupVersion.Group && o.Kind == "RouterRole" {
			return true
		}
	}
	return false
}

// conflictMessage says why a router's config is not written.
func conflictMessage(cm *corev1.ConfigMap) string {
	return fmt.Sprintf("ConfigMap %s exists and was not created by kvhint manager (no label %s=%s, no RouterRole owner): "+
		"the manager leaves it as it is; rename or delete it, or give the router another name",
		cm.Name, v1alpha1.ManagedByLabel, v1alpha1.ManagedBy)
}
