package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// Restart-mode routers (see v1alpha1.PolicyVolumeAnnotation): the manager
// writes each compiled config as an immutable ConfigMap named by its hash
// and points the opted-in Deployments' policy volume at it; the
// Deployment's own rolling update replaces the pods. Deployments are
// patched, never created or deleted, and only the one field; the
// admission policy config/admission/rollout_writers.yaml holds the
// manager's identity to that.
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=list;watch

// rollout is what the rollout step reads beside the compile input: the
// router's ReplicaSets and config revisions.
type rollout struct {
	replicaSets []appsv1.ReplicaSet
	revisions   []corev1.ConfigMap
}

// observeRollout reads a router's Deployments into in, and its
// ReplicaSets and config revisions, from the cache.
func (r *RouterReconciler) observeRollout(ctx context.Context, namespace, router string, in *rolegraph.Input) (*rollout, error) {
	sel := client.MatchingLabels{v1alpha1.RouterLabel: router}
	var deps appsv1.DeploymentList
	if err := r.Client.List(ctx, &deps, client.InNamespace(namespace), sel); err != nil {
		return nil, fmt.Errorf("listing the Deployments of router %s: %w", router, err)
	}
	in.Deployments = deps.Items
	ro := &rollout{}
	if !anyOptedIn(deps.Items) {
		return ro, nil
	}
	var rss appsv1.ReplicaSetList
	if err := r.Client.List(ctx, &rss, client.InNamespace(namespace), sel); err != nil {
		return nil, fmt.Errorf("listing the ReplicaSets of router %s: %w", router, err)
	}
	var cms corev1.ConfigMapList
	if err := r.Client.List(ctx, &cms, client.InNamespace(namespace), sel, client.HasLabels{v1alpha1.ConfigHashLabel}); err != nil {
		return nil, fmt.Errorf("listing the config revisions of router %s: %w", router, err)
	}
	ro.replicaSets, ro.revisions = rss.Items, cms.Items
	return ro, nil
}

func anyOptedIn(deps []appsv1.Deployment) bool {
	for i := range deps {
		if _, ok := deps[i].Annotations[v1alpha1.PolicyVolumeAnnotation]; ok {
			return true
		}
	}
	return false
}

// rollOut writes the config's revision, points every opted-in workload
// at it and removes the revisions nothing references any more. A config
// with no policy file (no role accepted yet) is not rolled: Dynamo's
// router does not start without one, and the pods keep what they run.
func (r *RouterReconciler) rollOut(ctx context.Context, in *rolegraph.Input, ro *rollout, compiled *rolegraph.Router) error {
	if compiled.Revision == nil || compiled.Config == nil {
		return nil
	}
	if err := r.writeRevision(ctx, ro, compiled.Revision); err != nil {
		return err
	}
	for _, w := range compiled.Workloads {
		if !w.Writable || w.References == compiled.Revision.Name {
			continue
		}
		if err := r.pointVolume(ctx, compiled.Revision, w, in.Deployments); err != nil {
			return err
		}
	}
	return r.collectRevisions(ctx, in, ro, compiled)
}

// writeRevision creates the immutable revision ConfigMap unless it
// exists. Its content is named by its hash, so an existing one holds the
// same data.
func (r *RouterReconciler) writeRevision(ctx context.Context, ro *rollout, want *corev1.ConfigMap) error {
	for i := range ro.revisions {
		if ro.revisions[i].Name == want.Name {
			return nil
		}
	}
	err := r.Client.Create(ctx, want.DeepCopy(), client.FieldOwner(FieldOwner))
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("creating ConfigMap %s: %w", want.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created config revision", "configMap", want.Name)
	return nil
}

// pointVolume sets the workload's policy volume to the revision with
// server-side apply of that one field, as its own field manager, forcing
// ownership: a reference set by hand is drift, set back to the compiled
// config and reported with an event on the Deployment.
func (r *RouterReconciler) pointVolume(ctx context.Context, rev *corev1.ConfigMap, w *rolegraph.Workload, deps []appsv1.Deployment) error {
	ac := appsv1ac.Deployment(w.Name, rev.Namespace).
		WithSpec(appsv1ac.DeploymentSpec().
			WithTemplate(corev1ac.PodTemplateSpec().
				WithSpec(corev1ac.PodSpec().
					WithVolumes(corev1ac.Volume().
						WithName(w.Volume).
						WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(rev.Name))))))
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(v1alpha1.RolloutFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("pointing volume %s of Deployment %s at ConfigMap %s: %w", w.Volume, w.Name, rev.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Rolling out config", "deployment", w.Name, "volume", w.Volume, "from", w.References, "to", rev.Name)
	if r.Recorder == nil {
		return nil
	}
	for i := range deps {
		if deps[i].Name == w.Name {
			r.Recorder.Eventf(&deps[i], nil, corev1.EventTypeNormal, "PolicyConfigChanged", "Roll",
				"volume %s: ConfigMap %s replaced by %s, the compiled config (a reference set by hand is set back)", w.Volume, w.References, rev.Name)
		}
	}
	return nil
}

// collectRevisions deletes the revisions of the router that no workload,
// ReplicaSet or pod references (rolegraph.StaleRevisions).
func (r *RouterReconciler) collectRevisions(ctx context.Context, in *rolegraph.Input, ro *rollout, compiled *rolegraph.Router) error {
	for _, cm := range rolegraph.StaleRevisions(compiled.Name, compiled.Hash, ro.revisions, in.Deployments, ro.replicaSets, in.Pods) {
		err := r.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			continue
		case err != nil:
			return fmt.Errorf("deleting ConfigMap %s: %w", cm.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleted config revision: no ReplicaSet of the router references it", "configMap", cm.Name)
	}
	return nil
}
