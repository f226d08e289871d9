package controllers

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// Restart-mode routers (see v1alpha1.RouterContainerAnnotation): the
// manager writes each compiled config as an immutable ConfigMap named by
// its hash and adds three entries of its own to the opted-in
// Deployments' pod template (a volume on that ConfigMap, a read-only
// mount of it in the router container, and the variable that names the
// file); the Deployment's own rolling update replaces the pods.
// Deployments are patched, never created or deleted, and only those
// entries; the admission policy config/admission/rollout_writers.yaml
// holds the manager's identity to that.
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
	graphs, err := r.listGraphs(ctx, namespace, router)
	if err != nil {
		return nil, err
	}
	in.Graphs = graphs
	ro := &rollout{}
	if !anyOptedIn(deps.Items) && !slices.ContainsFunc(graphs, func(g dynamograph.Graph) bool { return v1alpha1.GraphOptedIn(g.Annotations) }) {
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
		if v1alpha1.OptedIn(deps[i].Annotations) {
			return true
		}
	}
	return false
}

// rollOut writes the config's revision, points every opted-in workload
// at it and removes the revisions nothing references any more. A config
// with no policy file (no role accepted yet) is not rolled: Dynamo's
// router does not start without one, and the pods keep what they run.
// Nor is a workload whose router would not read the file
// (Workload.NotRead): it would restart for nothing.
func (r *RouterReconciler) rollOut(ctx context.Context, in *rolegraph.Input, ro *rollout, compiled *rolegraph.Router) error {
	if compiled.Revision == nil || compiled.Config == nil {
		return nil
	}
	if err := r.writeRevision(ctx, ro, compiled.Revision); err != nil {
		return err
	}
	for _, w := range compiled.Workloads {
		if !w.Writable || (w.References == compiled.Revision.Name && w.Entries) {
			continue
		}
		var err error
		if w.Kind == dynamograph.Kind {
			err = r.pointGraph(ctx, compiled.Revision, w)
		} else {
			err = r.pointVolume(ctx, compiled.Revision, w, in.Deployments)
		}
		if err != nil {
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

// pointVolume writes the manager's three entries of the workload's pod
// template with server-side apply, as its own field manager: the volume
// v1alpha1.PolicyVolumeName on the revision, its read-only mount at
// v1alpha1.PolicyMountPath in the router container, and
// v1alpha1.RouterPolicyConfigEnv naming the file. The owner's manifest
// has none of them, so a re-apply of it by another field manager, forced
// or not, leaves them alone. Ownership is forced: a reference set by
// hand is drift, set back to the compiled config and reported with an
// event on the Deployment.
func (r *RouterReconciler) pointVolume(ctx context.Context, rev *corev1.ConfigMap, w *rolegraph.Workload, deps []appsv1.Deployment) error {
	ac := appsv1ac.Deployment(w.Name, rev.Namespace).
		WithSpec(appsv1ac.DeploymentSpec().
			WithTemplate(PolicyEntries(rev.Name, w.Container)))
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(v1alpha1.RolloutFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("pointing Deployment %s at ConfigMap %s: %w", w.Name, rev.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Rolling out config", "deployment", w.Name, "container", w.Container, "from", w.References, "to", rev.Name)
	if r.Recorder == nil {
		return nil
	}
	for i := range deps {
		if deps[i].Name != w.Name {
			continue
		}
		if w.References == "" {
			r.Recorder.Eventf(&deps[i], nil, corev1.EventTypeNormal, "PolicyConfigChanged", "Roll",
				"volume %s: ConfigMap %s, the compiled config, mounted at %s in container %s", v1alpha1.PolicyVolumeName, rev.Name, v1alpha1.PolicyMountPath, w.Container)
			continue
		}
		r.Recorder.Eventf(&deps[i], nil, corev1.EventTypeNormal, "PolicyConfigChanged", "Roll",
			"volume %s: ConfigMap %s replaced by %s, the compiled config (a reference set by hand is set back)", v1alpha1.PolicyVolumeName, w.References, rev.Name)
	}
	return nil
}

// PolicyEntries is the pod template part of the manager's write to a
// restart-mode router: exactly the three entries, nothing else.
func PolicyEntries(revision, container string) *corev1ac.PodTemplateSpecApplyConfiguration {
	return corev1ac.PodTemplateSpec().
		WithSpec(corev1ac.PodSpec().
			WithVolumes(corev1ac.Volume().
				WithName(v1alpha1.PolicyVolumeName).
				WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(revision))).
			WithContainers(corev1ac.Container().
				WithName(container).
				WithVolumeMounts(corev1ac.VolumeMount().
					WithName(v1alpha1.PolicyVolumeName).
					WithMountPath(v1alpha1.PolicyMountPath).
					WithReadOnly(true)).
				WithEnv(corev1ac.EnvVar().
					WithName(v1alpha1.RouterPolicyConfigEnv).
					WithValue(v1alpha1.PolicyFilePath))))
}

// collectRevisions deletes the revisions of the router that no workload,
// ReplicaSet or pod references (rolegraph.StaleRevisions).
func (r *RouterReconciler) collectRevisions(ctx context.Context, in *rolegraph.Input, ro *rollout, compiled *rolegraph.Router) error {
	for _, cm := range rolegraph.StaleRevisions(compiled.Name, compiled.Hash, ro.revisions, in.Deployments, in.Graphs, ro.replicaSets, in.Pods) {
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
