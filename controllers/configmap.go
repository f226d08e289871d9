package controllers

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// FieldOwner is the field manager of everything the manager writes with
// server-side apply.
const FieldOwner = "kvhint-manager"

// applyConfigMap writes the router's compiled ConfigMap with server-side
// apply, forcing ownership of the fields it sets so that hand edits are
// undone. It writes nothing when the ConfigMap already says it all, so a
// reconcile caused by its own write, or by anything else that changes
// nothing, ends there; wrote says whether it wrote.
func (r *RouterReconciler) applyConfigMap(ctx context.Context, current *corev1.ConfigMap, compiled *rolegraph.Router) (wrote bool, err error) {
	want := compiled.ConfigMap
	if current != nil && holds(current, want) {
		return false, nil
	}
	ac := corev1ac.ConfigMap(want.Name, want.Namespace).
		WithLabels(want.Labels).
		WithAnnotations(want.Annotations).
		WithData(want.Data)
	for _, o := range want.OwnerReferences {
		ac.WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(o.APIVersion).WithKind(o.Kind).WithName(o.Name).WithUID(o.UID))
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying ConfigMap %s: %w", want.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Applied hints config", "configMap", want.Name, "hash", compiled.Hash, "owners", len(want.OwnerReferences))
	return true, nil
}

// holds reports whether a ConfigMap carries everything the manager would
// apply: labels, annotations and data with the same values, and exactly
// the RouterRole owners wanted. Fields others set are theirs.
func holds(cm, want *corev1.ConfigMap) bool {
	return contains(cm.Labels, want.Labels) &&
		contains(cm.Annotations, want.Annotations) &&
		contains(cm.Data, want.Data) &&
		// The policy file goes away while no role is accepted; an apply
		// without it removes it, since the manager owns it.
		(hasKey(want.Data, v1alpha1.HintsConfigKey) || !hasKey(cm.Data, v1alpha1.HintsConfigKey)) &&
		maps.Equal(roleOwners(cm.OwnerReferences), roleOwners(want.OwnerReferences)) &&
		// A candidate the rollout is done with goes, as the policy file
		// does: an apply without its keys removes them.
		!staleCandidateKeys(cm, want) &&
		(hasKey(want.Annotations, compiled.CandidateHashAnnotation) || !hasKey(cm.Annotations, compiled.CandidateHashAnnotation))
}

// staleCandidateKeys reports whether a ConfigMap holds a rollout's key
// (a candidate's, or its stage) that want does not.
func staleCandidateKeys(cm, want *corev1.ConfigMap) bool {
	for k := range cm.Data {
		if (k == compiled.StageKey || strings.HasPrefix(k, compiled.CandidatePrefix)) && !hasKey(want.Data, k) {
			return true
		}
	}
	return false
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func contains(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func roleOwners(refs []metav1.OwnerReference) map[string]string {
	out := map[string]string{}
	for _, o := range refs {
		if o.APIVersion == v1alpha1.GroupVersion.String() && o.Kind == "RouterRole" {
			out[string(o.UID)] = o.Name
		}
	}
	return out
}

// deleteConfigMap removes the compiled ConfigMap of a router that has no
// RouterRoles left. Garbage collection would remove it too, through the
// owner references, but only where a garbage collector runs and only once
// the last owner is gone from its graph; deleting it here is immediate and
// does not depend on it.
//
// A ConfigMap of the name that the manager did not create is never
// deleted (rolegraph.CreatedByManager).
func (r *RouterReconciler) deleteConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	if cm == nil || !rolegraph.CreatedByManager(cm) {
		return nil
	}
	err := r.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// Changed since the cache saw it; the change brings another event.
		return nil
	case err != nil:
		return fmt.Errorf("deleting ConfigMap %s: %w", cm.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted hints config: the router has no RouterRoles left", "configMap", cm.Name)
	return nil
}
