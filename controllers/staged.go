package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
)

// indexRolloutRouter finds the RouterRollouts of a router.
const indexRolloutRouter = "spec.router"

// keepCandidates is how many candidate ConfigMaps ("<router>-hints-<hash>")
// a rollout keeps for inspection, beside those it still needs (the stable
// config's, the candidate in flight, the last one rolled back).
const keepCandidates = 3

// routerRollout returns the RouterRollout that runs the router's
// rollouts, or nil, and those that name the router in vain.
func routerRollout(ctx context.Context, c client.Reader, namespace, router string) (*v1alpha1.RouterRollout, []*v1alpha1.RouterRollout, error) {
	var list v1alpha1.RouterRolloutList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexRolloutRouter: router}); err != nil {
		return nil, nil, fmt.Errorf("listing the RouterRollouts of router %s: %w", router, err)
	}
	ro, others := rollout.Winner(list.Items)
	return ro, others, nil
}

// stage turns the compiled ConfigMap into the one a router under a
// rollout holds (rollout.Render): the stable config as the ConfigMap holds
// it and the compiled config as the candidate. Routers whose pods read
// their config only at start-up (restart mode) are not staged.
func (r *RouterReconciler) stage(ctx context.Context, namespace string, current *corev1.ConfigMap, compiled *rolegraph.Router) (rollout.Staging, *v1alpha1.RouterRollout, error) {
	none := rollout.Staging{ConfigMap: compiled.ConfigMap}
	if len(compiled.Workloads) > 0 {
		return none, nil, nil
	}
	ro, _, err := routerRollout(ctx, r.Client, namespace, compiled.Name)
	if err != nil || ro == nil {
		return none, nil, err
	}
	var promoted *corev1.ConfigMap
	if h := ro.Status.StableHash; h != "" && current != nil && current.Annotations[v1alpha1.HashAnnotation] != h {
		cm := &corev1.ConfigMap{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.RevisionConfigMapName(compiled.Name, h)}, cm)
		switch {
		case err == nil && rolegraph.IsRevision(cm, compiled.Name):
			promoted = cm
		case err != nil && !apierrors.IsNotFound(err):
			return none, nil, fmt.Errorf("reading the promoted config %s: %w", h, err)
		}
	}
	st, err := rollout.Render(ro, current, promoted, compiled.ConfigMap)
	return st, ro, err
}

// applyCandidate writes the candidate's immutable ConfigMap, if it is not
// there yet, and deletes the rollout's older ones beyond keepCandidates.
func (r *RouterReconciler) applyCandidate(ctx context.Context, ro *v1alpha1.RouterRollout, cand *corev1.ConfigMap) error {
	if cand != nil {
		err := r.Client.Create(ctx, cand, client.FieldOwner(FieldOwner))
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return fmt.Errorf("creating candidate ConfigMap %s: %w", cand.Name, err)
		default:
			ctrl.LoggerFrom(ctx).Info("Kept candidate config", "configMap", cand.Name)
		}
	}
	var list corev1.ConfigMapList
	if err := r.Client.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingLabels{
		v1alpha1.RouterLabel: ro.Spec.Router, v1alpha1.ManagedByLabel: v1alpha1.ManagedBy,
	}); err != nil {
		return fmt.Errorf("listing the candidate ConfigMaps of router %s: %w", ro.Spec.Router, err)
	}
	needed := map[string]bool{ro.Status.StableHash: true, ro.Status.CandidateHash: true}
	if cand != nil {
		needed[cand.Labels[v1alpha1.ConfigHashLabel]] = true
	}
	if rb := ro.Status.LastRollback; rb != nil {
		needed[rb.Hash] = true
	}
	var old []corev1.ConfigMap
	for _, cm := range list.Items {
		if rolegraph.IsRevision(&cm, ro.Spec.Router) && ownedBy(&cm, ro) {
			if !needed[cm.Labels[v1alpha1.ConfigHashLabel]] {
				old = append(old, cm)
			}
		}
	}
	slices.SortFunc(old, func(a, b corev1.ConfigMap) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := keepCandidates; i < len(old); i++ {
		cm := &old[i]
		err := r.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting old candidate ConfigMap %s: %w", cm.Name, err)
		}
	}
	return nil
}

// ownedBy reports whether cm is owned by ro.
func ownedBy(cm *corev1.ConfigMap, ro *v1alpha1.RouterRollout) bool {
	for _, o := range cm.OwnerReferences {
		if o.UID == ro.UID && o.Kind == "RouterRollout" {
			return true
		}
	}
	return false
}

// markRoles reports, in the status of each RouterRole whose spec produced
// the router's candidate, that it is staged or was rolled back.
func markRoles(out *rolegraph.Output, roles []v1alpha1.RouterRole, ro *v1alpha1.RouterRollout, st rollout.Staging, now metav1.Time) {
	if ro == nil || (st.RolledBack == nil && st.Candidate == nil) {
		return
	}
	for i := range roles {
		rr := &roles[i]
		res := out.RouterRole(rr.Name)
		if res == nil || !st.ChangedRoles[rr.Name] {
			continue
		}
		if st.RolledBack != nil {
			rollout.MarkRolledBack(&res.Status, rr.Status.Conditions, rr.Generation, st.RolledBack, now)
		} else {
			rollout.MarkStaged(&res.Status, rr.Status.Conditions, rr.Generation, ro.Name, st.Candidate.Labels[v1alpha1.ConfigHashLabel], st.Step, now)
		}
	}
}
