package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// Writer reads and writes one kind of restart-mode workload: the same
// steps, whatever the kind.
type Writer interface {
	// Kind is the kind it writes (rolegraph.Workload.Kind).
	Kind() string
	// List reads the router's workloads of this kind, from the cache,
	// into in.
	List(ctx context.Context, namespace, router string, in *rolegraph.Input) error
	// OptedIn reports whether a workload of this kind that List read
	// into in opted in to restarts by the manager.
	OptedIn(in *rolegraph.Input) bool
	// Point writes the manager's three entries to the pod template of
	// w: a volume on the revision rev, its read-only mount in the router
	// container and the variable that names the file. A write the API
	// server or the manager's own check refuses is a *Refused.
	Point(ctx context.Context, rev *corev1.ConfigMap, w *rolegraph.Workload, in *rolegraph.Input) error
}

// Rollout rolls a router's compiled config out to its restart-mode
// workloads of every kind: it writes the config's immutable revision,
// points every opted-in workload at it (Writer.Point) and removes the
// revisions nothing references any more.
type Rollout struct {
	Client client.Client
	// FieldOwner is the field manager of the revisions it creates.
	FieldOwner string
	// Writers are the kinds of workload, in the order they are listed.
	Writers []Writer
}

// Observed is what the rollout step reads beside the compile input: the
// router's ReplicaSets and config revisions.
type Observed struct {
	replicaSets []appsv1.ReplicaSet
	revisions   []corev1.ConfigMap
}

// List reads a router's workloads of every kind into in and, when one
// opted in, its ReplicaSets and config revisions, from the cache.
func (r *Rollout) List(ctx context.Context, namespace, router string, in *rolegraph.Input) (*Observed, error) {
	ob := &Observed{}
	optedIn := false
	for _, w := range r.Writers {
		if err := w.List(ctx, namespace, router, in); err != nil {
			return nil, err
		}
		optedIn = optedIn || w.OptedIn(in)
	}
	if !optedIn {
		return ob, nil
	}
	sel := client.MatchingLabels{v1alpha1.RouterLabel: router}
	var rss appsv1.ReplicaSetList
	if err := r.Client.List(ctx, &rss, client.InNamespace(namespace), sel); err != nil {
		return nil, fmt.Errorf("listing the ReplicaSets of router %s: %w", router, err)
	}
	var cms corev1.ConfigMapList
	if err := r.Client.List(ctx, &cms, client.InNamespace(namespace), sel, client.HasLabels{v1alpha1.ConfigHashLabel}); err != nil {
		return nil, fmt.Errorf("listing the config revisions of router %s: %w", router, err)
	}
	ob.replicaSets, ob.revisions = rss.Items, cms.Items
	return ob, nil
}

// Roll writes the config's revision, points every opted-in workload at
// it and removes the revisions nothing references any more. A config
// with no policy file (no role accepted yet) is not rolled: Dynamo's
// router does not start without one, and the pods keep what they run.
// Nor is a workload whose router would not read the file
// (Workload.NotRead): it would restart for nothing.
func (r *Rollout) Roll(ctx context.Context, in *rolegraph.Input, ob *Observed, compiled *rolegraph.Router) error {
	if compiled.Revision == nil || compiled.Config == nil {
		return nil
	}
	if err := r.writeRevision(ctx, ob, compiled.Revision); err != nil {
		return err
	}
	for _, w := range compiled.Workloads {
		if !w.Writable || (w.References == compiled.Revision.Name && w.Entries) {
			continue
		}
		i := slices.IndexFunc(r.Writers, func(wr Writer) bool { return wr.Kind() == w.Kind })
		if i < 0 {
			return fmt.Errorf("%s %s: no writer of that kind", w.Kind, w.Name)
		}
		if err := r.Writers[i].Point(ctx, compiled.Revision, w, in); err != nil {
			return err
		}
	}
	return r.collectRevisions(ctx, in, ob, compiled)
}

// writeRevision creates the immutable revision ConfigMap unless it
// exists. Its content is named by its hash, so an existing one holds the
// same data.
func (r *Rollout) writeRevision(ctx context.Context, ob *Observed, want *corev1.ConfigMap) error {
	for i := range ob.revisions {
		if ob.revisions[i].Name == want.Name {
			return nil
		}
	}
	err := r.Client.Create(ctx, want.DeepCopy(), client.FieldOwner(r.FieldOwner))
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("creating ConfigMap %s: %w", want.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created config revision", "configMap", want.Name)
	return nil
}

// collectRevisions deletes the revisions of the router that no workload,
// ReplicaSet or pod references (rolegraph.StaleRevisions).
func (r *Rollout) collectRevisions(ctx context.Context, in *rolegraph.Input, ob *Observed, compiled *rolegraph.Router) error {
	for _, cm := range rolegraph.StaleRevisions(compiled.Name, compiled.Hash, ob.revisions, in.Deployments, in.Graphs, ob.replicaSets, in.Pods) {
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

// Refused is a write of the router's config to a restart-mode
// workload that was refused: by the API server (admission, validation,
// a dry run's) or by the manager's check of a dry run's result. Trying
// again at once would be refused again; the roles report it
// (rolegraph.Input.WriteRefusals) and the write is tried again later,
// or when anything of the router changes.
type Refused struct {
	Workload *rolegraph.Workload
	// Hash is the config hash of the revision it was to point at.
	Hash    string
	Message string
}

func (e *Refused) Error() string { return e.Message }

// isRefusal reports whether the API server refused a request for what it
// is (forbidden by admission or RBAC, invalid, malformed), rather than
// for when it came (a conflict, a timeout).
func isRefusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// revisionHash is the config hash of a revision ConfigMap.
func revisionHash(rev *corev1.ConfigMap) string {
	if h := rev.Labels[v1alpha1.ConfigHashLabel]; h != "" {
		return h
	}
	i := strings.LastIndexByte(rev.Name, '-')
	return rev.Name[i+1:]
}
