package controllers

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
// runs it on one pod first (a candidate Deployment, the router's
// Deployment paused), then points the router's Deployment at it and
// unpauses it (promote), or deletes the candidate Deployment (rollback).
// See rollout.AdvanceRestart and workload.CandidateDeployment.
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=create;delete

// defaultProgressDeadline is a Deployment's progress deadline when its
// spec sets none (the API server defaults it to this).
const defaultProgressDeadline = 600 * time.Second

// compiledSources is the annotation that says which role produced which
// entries of a compiled config.
const compiledSources = compiled.SourcesAnnotation

// restartRouter returns the router's restart-mode Deployment a rollout
// runs through, or nil: the first opted-in one by name that is not a
// candidate.
func restartRouter(deps []appsv1.Deployment) *appsv1.Deployment {
	var out *appsv1.Deployment
	for i := range deps {
		d := &deps[i]
		if workload.IsCandidate(d) || !v1alpha1.OptedIn(d.Annotations) {
			continue
		}
		if out == nil || d.Name < out.Name {
			out = d
		}
	}
	return out
}

// reconcileRestart advances the rollout of a restart-mode router
// Deployment: it writes the status first, then changes the Deployments,
// so a manager that stops between the two does the change again from the
// status (each change is idempotent).
func (r *RolloutReconciler) reconcileRestart(ctx context.Context, ro *v1alpha1.RouterRollout, dep *appsv1.Deployment, compiled string, pods []corev1.Pod) (ctrl.Result, error) {
	w := rolegraph.ReadWorkload(dep)
	router := ro.Spec.Router
	obs := rollout.RestartObserved{
		Now: r.now(), Pods: pods, ReadyWithin: defaultProgressDeadline,
		RevisionOf: func(p *corev1.Pod) string { return workload.RevisionHashOf(&p.Spec, router) },
	}
	if w.Entries {
		obs.Stable = workload.RevisionHashOf(&dep.Spec.Template.Spec, router)
	}
	if obs.Stable != "" {
		// The first config is not staged: nothing to compare it with.
		obs.Compiled = compiled
	}
	if s := dep.Spec.ProgressDeadlineSeconds; s != nil {
		obs.ReadyWithin = time.Duration(*s) * time.Second
	}
	cand := &appsv1.Deployment{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: dep.Namespace, Name: workload.CandidateName(dep.Name)}, cand)
	switch {
	case apierrors.IsNotFound(err):
		cand = nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading candidate Deployment %s: %w", workload.CandidateName(dep.Name), err)
	case !workload.IsCandidate(cand):
		return ctrl.Result{}, fmt.Errorf("deployment %s is in the way of the rollout's candidate: it is not one", cand.Name)
	default:
		obs.CandidateProblem = deploymentProblem(cand)
	}
	obs.RouterRolled = rolled(dep)

	d, act, err := rollout.AdvanceRestart(ro, obs, r.measure(ctx, ro, rollout.Observed{Stable: obs.Stable}))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "RouterRollout not run: its spec cannot be used")
		return ctrl.Result{}, nil
	}
	if res, err := r.writeStatus(ctx, ro, d.Status); err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	if err := r.actRestart(ctx, ro, dep, w, cand, act); err != nil {
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
// dep and its candidate Deployment cand (nil: none).
func (r *RolloutReconciler) actRestart(ctx context.Context, ro *v1alpha1.RouterRollout, dep *appsv1.Deployment, w *rolegraph.Workload, cand *appsv1.Deployment, act rollout.RestartAction) error {
	hash := ro.Status.CandidateHash
	switch act {
	case rollout.RestartRunCandidate:
		if err := r.setPaused(ctx, dep, true); err != nil {
			return err
		}
		rev := v1alpha1.RevisionConfigMapName(ro.Spec.Router, hash)
		// Owned by the router's Deployment, not the RouterRollout: a
		// rollout deleted mid-step leaves it for dropCandidates, which
		// unpauses the router's Deployment as it deletes it.
		owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}
		want := workload.CandidateDeployment(dep, rev, w.Container, owner)
		if cand == nil {
			if err := r.Client.Create(ctx, want, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating candidate Deployment %s: %w", want.Name, err)
			}
			ctrl.LoggerFrom(ctx).Info("Running the candidate on one pod", "deployment", want.Name, "configMap", rev)
			return nil
		}
		if workload.RevisionHashOf(&cand.Spec.Template.Spec, ro.Spec.Router) == hash {
			return nil
		}
		// A newer candidate replaces the one that ran.
		return r.deleteCandidate(ctx, cand)
	case rollout.RestartPromote:
		rev := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.RevisionConfigMapName(ro.Spec.Router, hash), Namespace: dep.Namespace}}
		if workload.RevisionHashOf(&dep.Spec.Template.Spec, ro.Spec.Router) != hash {
			wr := &workload.Deployments{Client: r.Client, Recorder: r.Recorder}
			if err := wr.Point(ctx, rev, w, &rolegraph.Input{Deployments: []appsv1.Deployment{*dep}}); err != nil {
				return err
			}
		}
		if err := r.setPaused(ctx, dep, false); err != nil {
			return err
		}
		return r.deleteCandidate(ctx, cand)
	case rollout.RestartRemoveCandidate:
		if cand == nil {
			return nil
		}
		// Unpaused first: a candidate Deployment left means the rollout
		// paused the router's Deployment.
		if err := r.setPaused(ctx, dep, false); err != nil {
			return err
		}
		return r.deleteCandidate(ctx, cand)
	}
	return nil
}

// setPaused sets spec.paused of the router's Deployment.
func (r *RolloutReconciler) setPaused(ctx context.Context, dep *appsv1.Deployment, paused bool) error {
	if dep.Spec.Paused == paused {
		return nil
	}
	body := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	if err := r.Client.Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(body)), client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("setting spec.paused=%t of Deployment %s: %w", paused, dep.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Set spec.paused of the router Deployment", "deployment", dep.Name, "paused", paused)
	return nil
}

// deleteCandidate deletes the candidate Deployment, its ReplicaSet and
// pod after it.
func (r *RolloutReconciler) deleteCandidate(ctx context.Context, cand *appsv1.Deployment) error {
	if cand == nil {
		return nil
	}
	err := r.Client.Delete(ctx, cand, client.Preconditions{UID: &cand.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting candidate Deployment %s: %w", cand.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted the candidate Deployment", "deployment", cand.Name)
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

// deploymentProblem is why a Deployment has no pods, as its status says:
// its ReplicaFailure condition, or a Progressing condition past its
// deadline.
func deploymentProblem(d *appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		if c.Status == corev1.ConditionTrue && c.Type == appsv1.DeploymentReplicaFailure {
			return c.Message
		}
		if c.Status == corev1.ConditionFalse && c.Type == appsv1.DeploymentProgressing {
			return c.Message
		}
	}
	return ""
}

// rolled reports whether a Deployment's rollout of its current template
// is complete: seen, unpaused, every replica updated and available, none
// of an older template left.
func rolled(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return !d.Spec.Paused && s.ObservedGeneration >= d.Generation &&
		s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}

// holdForRollout keeps a new compiled config out of the restart-mode
// Deployments of a router under a RouterRollout: the RolloutReconciler
// runs it on one pod first and points them at it when it promotes it. A
// Deployment that mounts no revision yet takes its first config at once:
// there is nothing to compare it with. It returns the RouterRollout and
// the revision the held Deployments run, when it held any.
func (r *RouterReconciler) holdForRollout(ctx context.Context, namespace string, compiled *rolegraph.Router) (*v1alpha1.RouterRollout, string, error) {
	holds := func(w *rolegraph.Workload) bool {
		return w.Kind == rolegraph.WorkloadKind && w.Writable && w.Entries && w.References != ""
	}
	held := ""
	for _, w := range compiled.Workloads {
		if holds(w) && held == "" {
			held = w.References
		}
	}
	if held == "" {
		return nil, "", nil
	}
	ro, _, err := routerRollout(ctx, r.Client, namespace, compiled.Name)
	if err != nil || ro == nil {
		return nil, "", err
	}
	for _, w := range compiled.Workloads {
		if holds(w) {
			w.Writable = false
		}
	}
	return ro, held, nil
}

// markHeld reports, in the status of each RouterRole whose spec produced
// a config held for a restart-mode rollout (holdForRollout), where it is:
// staged (waiting for the rollout, or at its step) or rolled back. Which
// roles produced it: those whose entries differ from the revision the
// held Deployments run (rollout.ChangedRoles).
func (r *RouterReconciler) markHeld(ctx context.Context, out *rolegraph.Output, roles []v1alpha1.RouterRole, ro *v1alpha1.RouterRollout, held string, compiled *rolegraph.Router, now metav1.Time) error {
	if ro == nil || compiled.Revision == nil || held == compiled.Revision.Name {
		return nil
	}
	stable := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ro.Namespace, Name: held}, stable)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading the running revision %s: %w", held, err)
	}
	hash := compiled.Hash
	changed := rollout.ChangedRoles(compiled.Revision.Annotations[compiledSources], stable.Annotations[compiledSources])
	st := ro.Status
	inFlight := st.CandidateHash == hash && (st.Phase == v1alpha1.RolloutProgressing || st.Phase == v1alpha1.RolloutPaused)
	step := "waiting for RouterRollout " + ro.Name + " to pick it up"
	if inFlight {
		step = fmt.Sprintf("step %d/2 (%s)", st.CurrentStep+1, []string{rollout.RestartStepOnePod, rollout.RestartStepRest}[min(st.CurrentStep, 1)])
	}
	for i := range roles {
		rr := &roles[i]
		res := out.RouterRole(rr.Name)
		if res == nil || !changed[rr.Name] {
			continue
		}
		switch rb := st.LastRollback; {
		case st.Phase == v1alpha1.RolloutRolledBack && rb != nil && rb.Hash == hash:
			rollout.MarkRolledBack(&res.Status, rr.Status.Conditions, rr.Generation, rb, now)
		case inFlight && st.CurrentStep > 0:
			// The rest: the role's own count of pods says how far.
		default:
			rollout.MarkStaged(&res.Status, rr.Status.Conditions, rr.Generation, ro.Name, hash, step, now)
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

// dropCandidates ends the step of a rollout deleted mid-step: each
// candidate Deployment left of the router goes, its router Deployment
// unpaused first.
func (r *RolloutReconciler) dropCandidates(ctx context.Context, namespace, router string) error {
	deps := &appsv1.DeploymentList{}
	if err := r.Client.List(ctx, deps, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.RouterLabel: router}, client.HasLabels{workload.CandidateOfLabel}); err != nil {
		return fmt.Errorf("listing the candidate Deployments of router %s: %w", router, err)
	}
	for i := range deps.Items {
		cand := &deps.Items[i]
		dep := &appsv1.Deployment{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cand.Labels[workload.CandidateOfLabel]}, dep)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading Deployment %s: %w", cand.Labels[workload.CandidateOfLabel], err)
		default:
			if err := r.setPaused(ctx, dep, false); err != nil {
				return err
			}
		}
		if err := r.deleteCandidate(ctx, cand); err != nil {
			return err
		}
	}
	return nil
}
