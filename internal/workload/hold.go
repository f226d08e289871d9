package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// A staged rollout of a restart-mode router Deployment (a RouterRollout)
// runs its candidate on one pod first with the Deployment's own rolling
// update, held at one surge pod: the manager never runs a pod template
// of its own. Holding sets the strategy to RollingUpdate with maxSurge 1
// and maxUnavailable 0 and minReadySeconds just under the progress
// deadline, so when the template is pointed at the candidate the
// Deployment adds exactly one pod and, that pod not being available yet,
// takes none of the stable ones down; once the pod exists the Deployment
// is paused, which freezes it at N stable pods and one candidate pod and
// stops its progress deadline. v1alpha1.HeldAnnotation records what the
// hold replaced, so a release (promote, roll back, or the rollout gone)
// puts the owner's strategy back from the API alone.

// Held is the record v1alpha1.HeldAnnotation keeps on a held Deployment.
type Held struct {
	// Stable is the config hash the Deployment ran before the hold: the
	// stable revision, which the template no longer mounts once it is
	// pointed at the candidate.
	Stable string `json:"stable"`
	// Strategy and MinReadySeconds are the Deployment's own, put back on
	// release; nil when its spec did not set them.
	Strategy        *appsv1.DeploymentStrategy `json:"strategy"`
	MinReadySeconds *int32                     `json:"minReadySeconds"`
}

// DefaultProgressDeadline is the API server's default
// progressDeadlineSeconds of a Deployment.
const DefaultProgressDeadline = 600

// HeldOf reads a Deployment's hold record: nil when it is not held.
func HeldOf(d *appsv1.Deployment) (*Held, error) {
	s, ok := d.Annotations[v1alpha1.HeldAnnotation]
	if !ok {
		return nil, nil
	}
	h := &Held{}
	if err := json.Unmarshal([]byte(s), h); err != nil || h.Stable == "" {
		if err == nil {
			err = fmt.Errorf("no stable hash")
		}
		return nil, fmt.Errorf("deployment %s: annotation %s is not a hold record: %w", d.Name, v1alpha1.HeldAnnotation, err)
	}
	return h, nil
}

// StableHash is the config hash of the revision a router Deployment runs
// as stable: the one its hold recorded while it is held, else the one its
// template mounts.
func StableHash(d *appsv1.Deployment, router string) (string, error) {
	h, err := HeldOf(d)
	if err != nil || h != nil {
		if h == nil {
			return "", err
		}
		return h.Stable, nil
	}
	return RevisionHashOf(&d.Spec.Template.Spec, router), nil
}

// holds reports whether the router reconciler keeps a new config out of
// workload w while a RouterRollout runs the router: an opted-in
// Deployment that already runs a revision of the manager's.
func holds(w *rolegraph.Workload) bool {
	return w.Kind == rolegraph.WorkloadKind && w.Writable && w.Entries && w.References != ""
}

// HeldRevision returns the revision ConfigMap the router's restart-mode
// Deployments run as stable, the first found, or "" when none would be
// held (holds): what a held one's record says (its template mounts the
// candidate), else what its template mounts.
func HeldRevision(router *rolegraph.Router, deps []appsv1.Deployment) (string, error) {
	for _, w := range router.Workloads {
		if !holds(w) {
			continue
		}
		for i := range deps {
			if deps[i].Name != w.Name {
				continue
			}
			if h, err := HeldOf(&deps[i]); err != nil || h != nil {
				if err != nil {
					return "", err
				}
				return v1alpha1.RevisionConfigMapName(router.Name, h.Stable), nil
			}
		}
		return w.References, nil
	}
	return "", nil
}

// KeepBack marks the router's workloads that a RouterRollout holds
// (holds) not writable: the rollout, not the router reconciler, points
// them at a new config.
func KeepBack(router *rolegraph.Router) {
	for _, w := range router.Workloads {
		if holds(w) {
			w.Writable = false
		}
	}
}

// HoldPatch is the merge patch that holds a Deployment whose stable
// config hash is stable: one surge pod, never available before the
// progress deadline, and the record of what it replaced.
func HoldPatch(d *appsv1.Deployment, stable string) ([]byte, error) {
	rec := Held{Stable: stable}
	if d.Spec.Strategy.Type != "" {
		rec.Strategy = d.Spec.Strategy.DeepCopy()
	}
	if d.Spec.MinReadySeconds != 0 {
		m := d.Spec.MinReadySeconds
		rec.MinReadySeconds = &m
	}
	ann, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	deadline := int32(DefaultProgressDeadline)
	if d.Spec.ProgressDeadlineSeconds != nil {
		deadline = *d.Spec.ProgressDeadlineSeconds
	}
	// The API server requires minReadySeconds below the deadline.
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.HeldAnnotation: string(ann)}},
		"spec": map[string]any{
			"strategy":        map[string]any{"type": appsv1.RollingUpdateDeploymentStrategyType, "rollingUpdate": map[string]any{"maxSurge": 1, "maxUnavailable": 0}},
			"minReadySeconds": max(deadline-1, 0),
		},
	})
}

// ReleasePatch is the merge patch that ends a hold: the owner's strategy
// and minReadySeconds back, the record gone, the Deployment unpaused. A
// merge patch merges objects, so each field the original left unset is
// written as null, which the API server defaults again.
func ReleasePatch(h *Held) ([]byte, error) {
	strategy := map[string]any{"type": nil, "rollingUpdate": nil}
	if s := h.Strategy; s != nil {
		strategy["type"] = s.Type
		if ru := s.RollingUpdate; ru != nil {
			strategy["rollingUpdate"] = map[string]any{"maxSurge": ru.MaxSurge, "maxUnavailable": ru.MaxUnavailable}
		}
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{v1alpha1.HeldAnnotation: nil}},
		"spec":     map[string]any{"strategy": strategy, "minReadySeconds": h.MinReadySeconds, "paused": false},
	})
}

// Hold runs the candidate revision rev of a router Deployment on one pod
// beside its stable ones: it holds the Deployment (once: a held one keeps
// its first record), points its template at rev, and pauses it once a
// live pod runs rev (candidateUp), or unpauses it while none does, so a
// newer candidate replaces the older one's pod. Each write is done only
// when the Deployment differs, so a reconcile at any point carries on.
func (d *Deployments) Hold(ctx context.Context, dep *appsv1.Deployment, w *rolegraph.Workload, rev *corev1.ConfigMap, candidateUp bool) error {
	h, err := HeldOf(dep)
	if err != nil {
		return err
	}
	if h == nil {
		stable := RevisionHashOf(&dep.Spec.Template.Spec, dep.Labels[v1alpha1.RouterLabel])
		body, err := HoldPatch(dep, stable)
		if err != nil {
			return err
		}
		if err := d.patch(ctx, dep, body, "holding it at one surge pod"); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Held the router Deployment at one surge pod", "deployment", dep.Name, "stable", stable)
	}
	if w.References != rev.Name || !w.Entries {
		// No Deployment in the input: Point's events speak of the
		// compiled config and hand edits; the rollout records its own.
		if err := d.Point(ctx, rev, w, &rolegraph.Input{}); err != nil {
			return err
		}
	}
	if dep.Spec.Paused == candidateUp {
		return nil
	}
	return d.patch(ctx, dep, fmt.Appendf(nil, `{"spec":{"paused":%t}}`, candidateUp), fmt.Sprintf("setting spec.paused=%t", candidateUp))
}

// Release ends the hold of a router Deployment, if it is held: it points
// the template at revision rev first (nil: leaves it), then puts the
// owner's strategy and minReadySeconds back and unpauses it, so the
// Deployment's own rolling update takes every pod to what the template
// mounts. Rev the candidate promotes it; rev the stable revision rolls the
// one candidate pod back, the stable pods untouched.
func (d *Deployments) Release(ctx context.Context, dep *appsv1.Deployment, w *rolegraph.Workload, rev *corev1.ConfigMap) error {
	h, err := HeldOf(dep)
	if err != nil || h == nil {
		return err
	}
	if rev != nil && (w.References != rev.Name || !w.Entries) {
		// No Deployment in the input: Point's events speak of the
		// compiled config and hand edits; the rollout records its own.
		if err := d.Point(ctx, rev, w, &rolegraph.Input{}); err != nil {
			return err
		}
	}
	body, err := ReleasePatch(h)
	if err != nil {
		return err
	}
	if err := d.patch(ctx, dep, body, "ending its hold"); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Released the router Deployment", "deployment", dep.Name, "template", RevisionHashOf(&dep.Spec.Template.Spec, dep.Labels[v1alpha1.RouterLabel]))
	return nil
}

func (d *Deployments) patch(ctx context.Context, dep *appsv1.Deployment, body []byte, what string) error {
	if err := d.Client.Patch(ctx, dep, client.RawPatch(types.MergePatchType, body), client.FieldOwner(v1alpha1.RolloutFieldManager)); err != nil {
		return fmt.Errorf("deployment %s: %s: %w", dep.Name, what, err)
	}
	return nil
}

// Problem is why a Deployment adds no pod, as its status says: its
// ReplicaFailure condition (a quota, say), else a Progressing condition
// past its deadline; "" when neither.
func Problem(d *appsv1.Deployment) string {
	want := map[appsv1.DeploymentConditionType]corev1.ConditionStatus{appsv1.DeploymentReplicaFailure: corev1.ConditionTrue, appsv1.DeploymentProgressing: corev1.ConditionFalse}
	for _, t := range []appsv1.DeploymentConditionType{appsv1.DeploymentReplicaFailure, appsv1.DeploymentProgressing} {
		for _, c := range d.Status.Conditions {
			if c.Type == t && c.Status == want[t] {
				return c.Message
			}
		}
	}
	return ""
}

// Rolled reports whether a Deployment's rollout of its current template
// is complete: seen, unpaused, every replica updated and available, none
// of an older template left.
func Rolled(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return !d.Spec.Paused && s.ObservedGeneration >= d.Generation &&
		s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}

// RevisionHashOf returns the config hash of the revision a pod spec
// mounts as the manager's volume, for router router, or "".
func RevisionHashOf(spec *corev1.PodSpec, router string) string {
	prefix := v1alpha1.RevisionConfigMapName(router, "")
	for _, v := range spec.Volumes {
		if v.Name == v1alpha1.PolicyVolumeName && v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, prefix) {
			return v.ConfigMap.Name[len(prefix):]
		}
	}
	return ""
}
