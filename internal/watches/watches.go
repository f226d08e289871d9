// Package watches holds what the manager's watches pass on to its
// reconcilers: the mappers from an object to the router it concerns (a
// request names a router: Namespace the namespace of its RouterRoles,
// Name the router) and the filters that keep events which change nothing
// a reconciler reads (status churn of running pods, a Deployment's
// rollout status) out of the queue, or delay them to batch them. It reads
// objects and, for RoutersUsingPolicy, one field index; it writes
// nothing.
//
// It imports the API types, internal/declared, internal/dynamograph and
// controller-runtime; never controllers.
package watches

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/routerinput"
)

// RouterRequest is the request of a router: the reconcilers' requests
// name a router, not an object, Namespace the namespace of its RouterRoles
// and Name the router (spec.router).
func RouterRequest(namespace, router string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: router}}
}

// RouterOfRole maps a RouterRole to its router. On an update the handler
// maps the old and the new object, so a role that moves to another router
// recompiles both.
func RouterOfRole(_ context.Context, o client.Object) []reconcile.Request {
	rr, ok := o.(*v1alpha1.RouterRole)
	if !ok || rr.Spec.Router == "" {
		return nil
	}
	return []reconcile.Request{RouterRequest(rr.Namespace, rr.Spec.Router)}
}

// RouterOfLabel maps a compiled ConfigMap or a router Pod to the router
// named by its RouterLabel.
func RouterOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	router := o.GetLabels()[v1alpha1.RouterLabel]
	if router == "" {
		return nil
	}
	return []reconcile.Request{RouterRequest(o.GetNamespace(), router)}
}

// RoutersUsingPolicy maps a HintPolicy to the routers of the RouterRoles
// that reference it, through index, the field index of their
// spec.hints[].policyRef.name.
func RoutersUsingPolicy(c client.Reader, index string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var roles v1alpha1.RouterRoleList
		if err := c.List(ctx, &roles, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "Listing the RouterRoles that reference a HintPolicy", "hintPolicy", client.ObjectKeyFromObject(o))
			return nil
		}
		seen := map[string]bool{}
		var reqs []reconcile.Request
		for _, rr := range roles.Items {
			if !seen[rr.Spec.Router] {
				seen[rr.Spec.Router] = true
				reqs = append(reqs, RouterRequest(rr.Namespace, rr.Spec.Router))
			}
		}
		return reqs
	}
}

// PoliciesOfRole maps a RouterRole to the HintPolicies it references, so
// that their usedBy follows; old and new objects are both mapped on update.
func PoliciesOfRole(_ context.Context, o client.Object) []reconcile.Request {
	rr, ok := o.(*v1alpha1.RouterRole)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, name := range routerinput.PolicyRefs(rr) {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rr.Namespace, Name: name}})
	}
	return reqs
}

// RouterPodChanged passes the Pod events that can change a Programmed
// count or a PolicyEjected condition: a pod appears, goes, starts
// terminating or terminates, joins or leaves a router, or reports another
// applied hash or other ejected policies. Other status churn of
// running pods does not reach the reconciler.
var RouterPodChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetLabels()[v1alpha1.RouterLabel] != n.GetLabels()[v1alpha1.RouterLabel] ||
			o.GetAnnotations()[v1alpha1.AppliedHashAnnotation] != n.GetAnnotations()[v1alpha1.AppliedHashAnnotation] ||
			o.GetAnnotations()[v1alpha1.EjectedPoliciesAnnotation] != n.GetAnnotations()[v1alpha1.EjectedPoliciesAnnotation] ||
			(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
			PodPhase(o) != PodPhase(n) || PodReady(o) != PodReady(n)
	},
}

// PodPhase is a pod's phase, "" for another object.
func PodPhase(o client.Object) corev1.PodPhase {
	if p, ok := o.(*corev1.Pod); ok {
		return p.Status.Phase
	}
	return ""
}

// PodReady is the pod's Ready condition: restart-mode routers count
// Ready pods.
func PodReady(o client.Object) corev1.ConditionStatus {
	if p, ok := o.(*corev1.Pod); ok {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
	}
	return ""
}

// ReplicaSetCameOrWent passes a ReplicaSet's creation and deletion: what
// decides whether a config revision is still some revision's.
var ReplicaSetCameOrWent = predicate.Funcs{
	UpdateFunc: func(event.UpdateEvent) bool { return false },
}

// ProgressBatch is how long an event that only moves a Programmed count
// (a router pod that appears, goes or turns Ready; a Deployment's rollout
// status) waits before its router is reconciled. Events within it are one
// reconcile and at most one status write: a 30-replica rollout moved the
// count, and wrote the status, about twice per pod without it. A sidecar's
// applied-hash report and a change of a workload's spec or metadata (the
// policy volume set by hand, an opt-in) are not delayed.
const ProgressBatch = 500 * time.Millisecond

// ProgressEvents enqueues an object's router after ProgressBatch, or at
// once when urgent says the update is more than progress.
func ProgressEvents(urgent func(old, new client.Object) bool) handler.Funcs {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object, now bool) {
		for _, req := range RouterOfLabel(ctx, o) {
			if now {
				q.Add(req)
			} else {
				q.AddAfter(req, ProgressBatch)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object, false)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			now := urgent(e.ObjectOld, e.ObjectNew)
			add(ctx, q, e.ObjectOld, now)
			add(ctx, q, e.ObjectNew, now)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object, false)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object, true)
		},
	}
}

// PodReportChanged: a sidecar's report, or a pod that joins or leaves a
// router, is news at once.
func PodReportChanged(o, n client.Object) bool {
	return o.GetLabels()[v1alpha1.RouterLabel] != n.GetLabels()[v1alpha1.RouterLabel] ||
		o.GetAnnotations()[v1alpha1.AppliedHashAnnotation] != n.GetAnnotations()[v1alpha1.AppliedHashAnnotation]
}

// WorkloadChanged: a Deployment's spec (its generation) or metadata (the
// opt-in, the router label) changed, not only its rollout status.
func WorkloadChanged(o, n client.Object) bool {
	return o.GetGeneration() != n.GetGeneration() ||
		!maps.Equal(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}

// GraphChanged: as WorkloadChanged for a DynamoGraphDeployment, and also
// the end of a rollout as Dynamo's operator reports it (the generation it
// observed, its state, Ready): what turns Programmed True once the pods
// run the revision, with nothing after it to batch with.
func GraphChanged(o, n client.Object) bool {
	if WorkloadChanged(o, n) {
		return true
	}
	ou, ok1 := o.(*unstructured.Unstructured)
	nu, ok2 := n.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return false
	}
	for _, f := range [][]string{{"status", "observedGeneration"}, {"status", "state"}} {
		ov, _, _ := unstructured.NestedFieldNoCopy(ou.Object, f...)
		nv, _, _ := unstructured.NestedFieldNoCopy(nu.Object, f...)
		if !equality.Semantic.DeepEqual(ov, nv) {
			return true
		}
	}
	return dynamograph.ReadyStatus(ou) != dynamograph.ReadyStatus(nu)
}

// CatalogEvents maps a declared-catalog ConfigMap to the router it names:
// on an update the old and the new router both, so that a label moved to
// another router recompiles both; on a delete, what was loaded from it is
// dropped too.
func CatalogEvents(c *declared.Store) handler.TypedEventHandler[*corev1.ConfigMap, reconcile.Request] {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], cms ...*corev1.ConfigMap) {
		for _, cm := range cms {
			if router := cm.Labels[v1alpha1.CatalogForLabel]; router != "" {
				q.Add(RouterRequest(cm.Namespace, router))
			}
		}
	}
	return handler.TypedFuncs[*corev1.ConfigMap, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if c != nil {
				c.Forget(e.Object.UID)
			}
			enqueue(q, e.Object)
		},
		// A background load of the ConfigMap's text ended.
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*corev1.ConfigMap], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}
}

// RouterOfRollout maps a RouterRollout to its router.
func RouterOfRollout(_ context.Context, o client.Object) []reconcile.Request {
	ro, ok := o.(*v1alpha1.RouterRollout)
	if !ok || ro.Spec.Router == "" {
		return nil
	}
	return []reconcile.Request{RouterRequest(ro.Namespace, ro.Spec.Router)}
}

// StagingChanged passes the RouterRollout events that change what the
// router's ConfigMap stages: its steps, the candidate and its step, the
// stable config, a rollback.
var StagingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.RouterRollout)
		n, ok2 := e.ObjectNew.(*v1alpha1.RouterRollout)
		if !ok1 || !ok2 {
			return true
		}
		rb := func(r *v1alpha1.RouterRollout) string {
			if r.Status.LastRollback == nil {
				return ""
			}
			return r.Status.LastRollback.Hash
		}
		return o.Generation != n.Generation || o.Status.Phase != n.Status.Phase ||
			o.Status.CandidateHash != n.Status.CandidateHash || o.Status.CurrentStep != n.Status.CurrentStep ||
			o.Status.StableHash != n.Status.StableHash || rb(o) != rb(n)
	},
}

// RolloutCameOrWent passes creations and deletions, which decide which
// RouterRollout runs a router's rollouts.
var RolloutCameOrWent = predicate.Funcs{
	UpdateFunc: func(event.UpdateEvent) bool { return false },
}

// CompiledConfigMap passes the router's own ConfigMap, not the candidate
// ConfigMaps beside it.
var CompiledConfigMap = predicate.NewPredicateFuncs(func(o client.Object) bool {
	router := o.GetLabels()[v1alpha1.RouterLabel]
	return router != "" && o.GetName() == v1alpha1.HintsConfigMapName(router)
})

// RolloutPodChanged passes the Pod events that change what a rollout
// counts: a pod appears, goes, starts terminating or terminates, or
// reports another config status.
var RolloutPodChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetLabels()[v1alpha1.RouterLabel] != n.GetLabels()[v1alpha1.RouterLabel] ||
			o.GetAnnotations()[rolloutapi.ConfigStatusAnnotation] != n.GetAnnotations()[rolloutapi.ConfigStatusAnnotation] ||
			(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
			PodPhase(o) != PodPhase(n)
	},
}

// DynamoVersionChanged passes a RouterRole whose Dynamo version annotation
// changed: it picks the role's dialect, and no spec change comes with it.
var DynamoVersionChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[v1alpha1.DynamoVersionAnnotation] != e.ObjectNew.GetAnnotations()[v1alpha1.DynamoVersionAnnotation]
	},
}
