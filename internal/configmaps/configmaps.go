package configmaps

import (
	"context"
	"fmt"
	"maps"
	"slices"
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

// Writer writes and deletes a router's ConfigMaps.
type Writer struct {
	Client client.Client
	// FieldOwner is the field manager of what it writes.
	FieldOwner string
}

// KeepCandidates is how many candidate ConfigMaps ("<router>-hints-<hash>")
// a rollout keeps for inspection, beside those it still needs (the stable
// config's, the candidate in flight, the last one rolled back).
const KeepCandidates = 3

// Apply writes the router's compiled ConfigMap with server-side apply,
// forcing ownership of the fields it sets so that hand edits are undone.
// It writes nothing when the ConfigMap already says it all, so a reconcile
// caused by its own write, or by anything else that changes nothing, ends
// there; wrote says whether it wrote.
func (w *Writer) Apply(ctx context.Context, current *corev1.ConfigMap, compiled *rolegraph.Router) (wrote bool, err error) {
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
	if err := w.Client.Apply(ctx, ac, client.FieldOwner(w.FieldOwner), client.ForceOwnership); err != nil {
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

// Delete removes the compiled ConfigMap of a router that has no
// RouterRoles left. Garbage collection would remove it too, through the
// owner references, but only where a garbage collector runs and only once
// the last owner is gone from its graph; deleting it here is immediate and
// does not depend on it.
//
// A ConfigMap of the name that the manager did not create is never
// deleted (rolegraph.CreatedByManager).
func (w *Writer) Delete(ctx context.Context, cm *corev1.ConfigMap) error {
	if cm == nil || !rolegraph.CreatedByManager(cm) {
		return nil
	}
	err := w.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
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

// Candidate writes a rollout's candidate's immutable ConfigMap, if it is
// not there yet, and deletes the rollout's older ones beyond
// KeepCandidates.
func (w *Writer) Candidate(ctx context.Context, ro *v1alpha1.RouterRollout, cand *corev1.ConfigMap) error {
	if cand != nil {
		err := w.Client.Create(ctx, cand, client.FieldOwner(w.FieldOwner))
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return fmt.Errorf("creating candidate ConfigMap %s: %w", cand.Name, err)
		default:
			ctrl.LoggerFrom(ctx).Info("Kept candidate config", "configMap", cand.Name)
		}
	}
	var list corev1.ConfigMapList
	if err := w.Client.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingLabels{
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
	for i := KeepCandidates; i < len(old); i++ {
		cm := &old[i]
		err := w.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})
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
