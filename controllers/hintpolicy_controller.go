package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/watches"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// HintPolicyReconciler writes HintPolicy status: whether the policy is
// valid on its own, and which RouterRoles use it. The roles themselves
// are recompiled by the RouterReconciler, which watches HintPolicies too.
type HintPolicyReconciler struct {
	Client   client.Client
	Catalog  *hints.Catalog
	Recorder events.EventRecorder

	// catalogs and catalogCache: see RouterReconciler. A HintPolicy whose
	// type the linked catalog does not hold is checked against the
	// declarations of its namespace that declare the type.
	catalogs     *declared.Store
	catalogCache cache.Cache
}

// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=hintpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=hintpolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=routerroles,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile checks one HintPolicy and writes its status if it changed.
func (r *HintPolicyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	var hp v1alpha1.HintPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &hp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var roles v1alpha1.RouterRoleList
	if err := r.Client.List(ctx, &roles, client.InNamespace(hp.Namespace), client.MatchingFields{indexPolicyRef: hp.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the RouterRoles that reference HintPolicy %s: %w", hp.Name, err)
	}
	var usedBy []string
	for _, rr := range roles.Items {
		usedBy = append(usedBy, rr.Name)
	}
	slices.Sort(usedBy)

	status, err := r.catalogs.PolicyStatus(ctx, r.Catalog, &hp, usedBy, metav1.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	if equality.Semantic.DeepEqual(hp.Status, status) {
		return ctrl.Result{}, nil
	}
	old := hp.DeepCopy()
	hp.Status = status
	if err := patchStatus(ctx, r.Client, &hp, old); err != nil {
		return retryStale(ctx, fmt.Errorf("writing the status of HintPolicy %s: %w", hp.Name, err))
	}
	recordTransitions(r.Recorder, &hp, old.Status.Conditions, hp.Status.Conditions, hintPolicyEvents)
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler: a HintPolicy's own spec
// changes, RouterRoles that start or stop referencing it, and declared
// catalogs of its namespace.
func (r *HintPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.HintPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.RouterRole{},
			handler.EnqueueRequestsFromMapFunc(watches.PoliciesOfRole),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	if r.catalogCache != nil {
		b = b.WatchesRawSource(source.Kind(r.catalogCache, &corev1.ConfigMap{},
			handler.TypedEnqueueRequestsFromMapFunc(policiesOfNamespace(mgr.GetClient()))))
	}
	return b.Complete(r)
}

// policiesOfNamespace maps a declared-catalog ConfigMap to every
// HintPolicy of its namespace: a declaration may add or change the type of
// any of them. Declarations change seldom.
func policiesOfNamespace(c client.Reader) handler.TypedMapFunc[*corev1.ConfigMap, reconcile.Request] {
	return func(ctx context.Context, cm *corev1.ConfigMap) []reconcile.Request {
		var hps v1alpha1.HintPolicyList
		if err := c.List(ctx, &hps, client.InNamespace(cm.Namespace)); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the HintPolicies of a namespace for a declared catalog", "configMap", client.ObjectKeyFromObject(cm))
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(hps.Items))
		for _, hp := range hps.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&hp)})
		}
		return reqs
	}
}
