package routerinput

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// RouterIndex is the field index that finds the RouterRoles of a router
// (spec.router); the cache Read lists from must serve it.
const RouterIndex = "spec.router"

// Reader reads a router's compile input.
type Reader struct {
	// Client is the manager's cache, indexed by RouterIndex.
	Client client.Reader
	// APIReader reads around the cache (see configMap); nil: never.
	APIReader client.Reader
}

// Read reads what the compile step needs for one router, from the
// manager's cache (see configMap for the one exception), and the router's
// compiled ConfigMap as it is, or nil.
func (r Reader) Read(ctx context.Context, namespace, router string) (rolegraph.Input, *corev1.ConfigMap, error) {
	var in rolegraph.Input
	var roles v1alpha1.RouterRoleList
	if err := r.Client.List(ctx, &roles, client.InNamespace(namespace), client.MatchingFields{RouterIndex: router}); err != nil {
		return in, nil, fmt.Errorf("listing the RouterRoles of router %s: %w", router, err)
	}
	in.RouterRoles = roles.Items

	seen := map[string]bool{}
	for i := range roles.Items {
		for _, name := range PolicyRefs(&roles.Items[i]) {
			if seen[name] {
				continue
			}
			seen[name] = true
			var hp v1alpha1.HintPolicy
			err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &hp)
			switch {
			case apierrors.IsNotFound(err):
				// Reported as HintPolicyNotFound by the compile step.
			case err != nil:
				return in, nil, fmt.Errorf("reading HintPolicy %s: %w", name, err)
			default:
				in.HintPolicies = append(in.HintPolicies, hp)
			}
		}
	}

	current, err := r.configMap(ctx, namespace, router)
	if err != nil {
		return in, nil, err
	}
	if current != nil {
		in.ConfigMaps = []corev1.ConfigMap{*current}
	}

	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.RouterLabel: router}); err != nil {
		return in, nil, fmt.Errorf("listing the pods of router %s: %w", router, err)
	}
	in.Pods = pods.Items
	return in, current, nil
}

// configMap reads the router's compiled ConfigMap, or nil. The cache holds
// only ConfigMaps labelled as compiled ones; when it has none, the API
// server is asked too, because a ConfigMap whose labels were edited away
// still holds the entries routers run, and the last good ones among them
// must survive the repair. That costs a read when a router is new.
func (r Reader) configMap(ctx context.Context, namespace, router string) (*corev1.ConfigMap, error) {
	key := client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName(router)}
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, cm)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ConfigMap %s: %w", key.Name, err)
	}
	return cm, nil
}

// PolicyRefs returns the HintPolicy names a RouterRole references, sorted
// and without repeats.
func PolicyRefs(rr *v1alpha1.RouterRole) []string {
	var names []string
	for _, h := range rr.Spec.Hints {
		if h.PolicyRef != nil {
			names = append(names, h.PolicyRef.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
