package controllers

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
)

// A restart-mode router Deployment under a RouterRollout: the
// RouterReconciler writes each new compiled config as a revision but does
// not point the Deployment at it (holdForRollout); the RolloutReconciler
// runs it on one pod first by the Deployment's own rolling update, held
// at one surge pod and paused, then releases the hold with the template
// on the candidate (promote) or back on the stable revision (rollback).
// See rollout.AdvanceRestart and workload.Deployments.Hold.

// restartRouter returns the router's restart-mode Deployment a rollout
// runs through, or nil: the first opted-in one by name.
func restartRouter(deps []appsv1.Deployment) *appsv1.Deployment {
	var out *appsv1.Deployment
	for i := range deps {
		d := &deps[i]
		if v1alpha1.OptedIn(d.Annotations) && (out == nil || d.Name < out.Name) {
			out = d
		}
	}
	return out
}

// reconcileRestart advances the rollout of a restart-mode router
// Deployment: it writes the status first, then changes the Deployment,
// so a manager that stops between the two does the change again from the
// status (each change is idempotent).
func (r *RolloutReconciler) reconcileRestart(ctx context.Context, ro *v1alpha1.RouterRollout, dep *appsv1.Deployment, compiled string, pods []corev1.Pod) (ctrl.Result, error) {
	router := ro.Spec.Router
	stable, err := workload.StableHash(dep, router)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs := rollout.RestartObserved{
		Now: r.now(), Pods: pods, ReadyWithin: workload.DefaultProgressDeadline * time.Second, Stable: stable,
		RevisionOf:       func(p *corev1.Pod) string { return workload.RevisionHashOf(&p.Spec, router) },
		CandidateProblem: workload.Problem(dep), RouterRolled: workload.Rolled(dep),
	}
	if held, _ := workload.HeldOf(dep); held == nil && dep.Spec.Paused {
		obs.OwnerPaused = true
	}
	if stable != "" {
		// The first config is not staged: nothing to compare it with.
		obs.Compiled = compiled
	}
	if s := dep.Spec.ProgressDeadlineSeconds; s != nil {
		obs.ReadyWithin = time.Duration(*s) * time.Second
	}
	d, act, err := rollout.AdvanceRestart(ro, obs, r.measure(ctx, ro, rollout.Observed{Stable: stable}))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "RouterRollout not run: its spec cannot be used")
		return ctrl.Result{}, nil
	}
	if res, err := r.writeStatus(ctx, ro, d.Status); err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	rev := map[rollout.RestartAction]string{rollout.RestartHold: d.Status.CandidateHash, rollout.RestartPromote: d.Status.CandidateHash,
		rollout.RestartRollBack: stable, rollout.RestartRelease: compiled}[act]
	if act == rollout.RestartPromote && rev == "" {
		// Promoted to stable this reconcile: the template mounts it.
		rev = stable
	}
	if err := r.actRestart(ctx, dep, act, rev, pods); err != nil {
		if r.Recorder != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
			// Admission or RBAC refuses what the step needs (see
			// docs/rollout.md, "Restart-mode routers"): say it where the
			// rollout's readers look, not only in the log.
			r.Recorder.Eventf(ro, dep, corev1.EventTypeWarning, "WriteRefused", "Roll", "%s", err.Error())
		}
		return ctrl.Result{}, err
	}
	return r.finish(ctx, ro, d)
}

// actRestart does what AdvanceRestart decided to the router's Deployment
// dep, with hash the revision its template must mount ("": as it is).
func (r *RolloutReconciler) actRestart(ctx context.Context, dep *appsv1.Deployment, act rollout.RestartAction, hash string, pods []corev1.Pod) error {
	router := dep.Labels[v1alpha1.RouterLabel]
	var rev *corev1.ConfigMap
	if hash != "" {
		rev = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.RevisionConfigMapName(router, hash), Namespace: dep.Namespace}}
	}
	wr := &workload.Deployments{Client: r.Client, Recorder: r.Recorder}
	w := rolegraph.ReadWorkload(dep)
	switch act {
	case rollout.RestartHold:
		return wr.Hold(ctx, dep, w, rev, candidateUp(pods, router, hash))
	case rollout.RestartPromote, rollout.RestartRollBack, rollout.RestartRelease:
		return wr.Release(ctx, dep, w, rev)
	}
	return nil
}

// candidateUp reports whether a live pod of the router runs config hash.
func candidateUp(pods []corev1.Pod, router, hash string) bool {
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
			workload.RevisionHashOf(&p.Spec, router) == hash {
			return true
		}
	}
	return false
}

// releaseHolds ends the hold of each restart-mode Deployment of a router
// no RouterRollout runs any more (deleted mid-step), its template left on
// what it mounts: the RouterReconciler then points it at the compiled
// config, as without a rollout.
func (r *RolloutReconciler) releaseHolds(ctx context.Context, namespace, router string) error {
	deps := &appsv1.DeploymentList{}
	if err := r.Client.List(ctx, deps, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.RouterLabel: router}); err != nil {
		return fmt.Errorf("listing the Deployments of router %s: %w", router, err)
	}
	wr := &workload.Deployments{Client: r.Client, Recorder: r.Recorder}
	for i := range deps.Items {
		if dep := &deps.Items[i]; v1alpha1.OptedIn(dep.Annotations) {
			if err := wr.Release(ctx, dep, rolegraph.ReadWorkload(dep), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordEvents records a decision's events on the RouterRollout.
func (r *RolloutReconciler) recordEvents(ctx context.Context, ro *v1alpha1.RouterRollout, events []rollout.Event) {
	for _, e := range events {
		if r.Recorder == nil {
			break
		}
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(ro, nil, typ, e.Reason, e.Action, "%s", e.Message)
		ctrl.LoggerFrom(ctx).Info("Rollout "+e.Action, "rollout", ro.Name, "reason", e.Reason, "message", e.Message)
	}
}

// holdForRollout keeps a new compiled config out of the restart-mode
// Deployments of a router under a RouterRollout: the RolloutReconciler
// runs it on one pod first and points them at it when it promotes it. A
// Deployment that mounts no revision yet takes its first config at once:
// there is nothing to compare it with. It returns the RouterRollout and
// the revision the held Deployments run as stable (their hold record's,
// while the rollout holds them), when it held any.
func (r *RouterReconciler) holdForRollout(ctx context.Context, namespace string, compiled *rolegraph.Router, deps []appsv1.Deployment) (*v1alpha1.RouterRollout, string, error) {
	held, err := workload.HeldRevision(compiled, deps)
	if err != nil || held == "" {
		return nil, "", err
	}
	ro, _, err := routerRollout(ctx, r.Client, namespace, compiled.Name)
	if err != nil || ro == nil {
		return nil, "", err
	}
	workload.KeepBack(compiled)
	return ro, held, nil
}

// markHeld reports, in the status of each RouterRole whose spec produced
// a config held for a restart-mode rollout (holdForRollout), where it is
// (rollout.MarkHeld). Which roles produced it: those whose entries differ
// from the revision the held Deployments run (rollout.ChangedRoles).
func (r *RouterReconciler) markHeld(ctx context.Context, out *rolegraph.Output, roles []v1alpha1.RouterRole, ro *v1alpha1.RouterRollout, held string, compiledRouter *rolegraph.Router, now metav1.Time) error {
	if ro == nil || compiledRouter.Revision == nil || held == compiledRouter.Revision.Name {
		return nil
	}
	stable := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ro.Namespace, Name: held}, stable); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the running revision %s: %w", held, err)
	}
	changed := rollout.ChangedRoles(compiledRouter.Revision.Annotations[compiled.SourcesAnnotation], stable.Annotations[compiled.SourcesAnnotation])
	for i := range roles {
		if res := out.RouterRole(roles[i].Name); res != nil && changed[roles[i].Name] {
			rollout.MarkHeld(&res.Status, roles[i].Status.Conditions, roles[i].Generation, ro, compiledRouter.Hash, now)
		}
	}
	return nil
}

// graphRouter reports whether the router's pods read a config revision
// with no opted-in Deployment of the router's to run them: a
// DynamoGraphDeployment's, which a rollout does not stage.
func graphRouter(router string, pods []corev1.Pod) bool {
	for i := range pods {
		if workload.RevisionHashOf(&pods[i].Spec, router) != "" {
			return true
		}
	}
	return false
}
