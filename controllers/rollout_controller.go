package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/watches"
)

// RolloutReconciler runs the staged rollouts of routers: it owns the
// status of RouterRollouts, which the RouterReconciler follows when it
// writes a router's ConfigMap. Its requests name a router, as the
// RouterReconciler's do.
type RolloutReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Analysis takes a step's measurements; nil is rollout.NoAnalysis.
	Analysis rollout.Analysis
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=routerrollouts,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=routerrollouts/status,verbs=get;patch

// Reconcile advances the rollout of one router (rollout.Advance) and
// writes its status once; then it removes the manual-control annotations
// it acted on.
func (r *RolloutReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	ro, others, err := routerRollout(ctx, r.Client, req.Namespace, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ro == nil {
		return ctrl.Result{}, r.releaseHolds(ctx, req.Namespace, req.Name)
	}
	now := r.now()
	for _, o := range others {
		old := o.DeepCopy()
		o.Status = rollout.Conflicted(o, ro, metav1.NewTime(now))
		if equality.Semantic.DeepEqual(old.Status, o.Status) {
			continue
		}
		if err := patchStatus(ctx, r.Client, o, old); err != nil && err != errStale {
			return ctrl.Result{}, fmt.Errorf("writing the status of RouterRollout %s: %w", o.Name, err)
		}
	}

	obs := rollout.Observed{Now: now}
	cm := &corev1.ConfigMap{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: v1alpha1.HintsConfigMapName(req.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading ConfigMap %s: %w", v1alpha1.HintsConfigMapName(req.Name), err)
	case rolegraph.CreatedByManager(cm):
		obs.Stable = cm.Annotations[v1alpha1.HashAnnotation]
		if s, err := compiled.Split(cm.Data); err == nil && s.Stage != nil {
			obs.Candidate = s.Stage.Candidate
		}
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(req.Namespace), client.MatchingLabels{v1alpha1.RouterLabel: req.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pods of router %s: %w", req.Name, err)
	}
	obs.Pods = pods.Items
	deps := &appsv1.DeploymentList{}
	if err := r.Client.List(ctx, deps, client.InNamespace(req.Namespace), client.MatchingLabels{v1alpha1.RouterLabel: req.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the Deployments of router %s: %w", req.Name, err)
	}
	if dep := restartRouter(deps.Items); dep != nil {
		// Restart mode: the ConfigMap holds what the router compiled.
		return r.reconcileRestart(ctx, ro, dep, obs.Stable, pods.Items)
	}
	obs.RestartMode = graphRouter(ro.Spec.Router, pods.Items)

	d, err := rollout.Advance(ro, obs, r.measure(ctx, ro, obs))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "RouterRollout not run: its spec cannot be used")
		return ctrl.Result{}, nil
	}
	if res, err := r.writeStatus(ctx, ro, d.Status); err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	return r.finish(ctx, ro, d)
}

// writeStatus persists status, the one status write of a reconcile, when
// it differs from ro's; a non-zero RequeueAfter says the write met a
// stale object and the reconcile ends there.
func (r *RolloutReconciler) writeStatus(ctx context.Context, ro *v1alpha1.RouterRollout, status v1alpha1.RouterRolloutStatus) (ctrl.Result, error) {
	if equality.Semantic.DeepEqual(ro.Status, status) {
		return ctrl.Result{}, nil
	}
	old := ro.DeepCopy()
	ro.Status = status
	return retryStale(ctx, patchStatus(ctx, r.Client, ro, old))
}

// finish records a decision's events, removes the annotations it acted
// on and requeues when it asked to be looked at again.
func (r *RolloutReconciler) finish(ctx context.Context, ro *v1alpha1.RouterRollout, d rollout.Decision) (ctrl.Result, error) {
	r.recordEvents(ctx, ro, d.Events)
	if len(d.Consumed) > 0 {
		if err := r.removeAnnotations(ctx, ro, d.Consumed); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: d.After}, nil
}

func (r *RolloutReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// measure returns the Measure of one reconcile: one measurement of the
// current step by the Analysis.
func (r *RolloutReconciler) measure(ctx context.Context, ro *v1alpha1.RouterRollout, obs rollout.Observed) rollout.Measure {
	return func(stage rolloutapi.Stage, since time.Time, pods rollout.Pods) rollout.Result {
		set, _ := rollout.SettingsOf(ro.Spec.Analysis)
		var a rollout.Analysis = rollout.NoAnalysis{}
		if r.Analysis != nil {
			a = r.Analysis
		}
		return a.Analyze(ctx, rollout.Input{
			Namespace: ro.Namespace, Router: ro.Spec.Router, Stage: stage, Stable: obs.Stable, Since: since,
			Settings: set, Pods: pods.Live, Reports: pods.Reports,
		})
	}
}

// removeAnnotations removes the manual-control annotations the rollout
// acted on, unless they changed since.
func (r *RolloutReconciler) removeAnnotations(ctx context.Context, ro *v1alpha1.RouterRollout, keys []string) error {
	ann := map[string]any{}
	for _, k := range keys {
		ann[k] = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "resourceVersion": ro.ResourceVersion}})
	if err != nil {
		return err
	}
	err = r.Client.Patch(ctx, ro, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldOwner))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or changed: the next reconcile sees it as it is.
		return nil
	case err != nil:
		return fmt.Errorf("removing annotations %v of RouterRollout %s: %w", keys, ro.Name, err)
	}
	return nil
}

// SetupWithManager registers the reconciler and its watches, each mapped
// to the router it concerns.
func (r *RolloutReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("rollout").
		Watches(&v1alpha1.RouterRollout{},
			handler.EnqueueRequestsFromMapFunc(watches.RouterOfRollout),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, watches.RolloutCameOrWent))).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(watches.RouterOfLabel),
			builder.WithPredicates(watches.CompiledConfigMap)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(watches.RouterOfLabel),
			builder.WithPredicates(watches.RolloutPodChanged)).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(watches.RouterOfLabel)).
		WithLogConstructor(func(req *reconcile.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "rollout")
			if req != nil {
				l = l.WithValues("namespace", req.Namespace, "router", req.Name)
			}
			return l
		}).
		Complete(r)
}
