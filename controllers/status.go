package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// errStale reports a status write refused because the object changed
// since the cache saw it; the reconciler tries again on a fresh read.
var errStale = errors.New("the object changed since the cache saw it")

// writeStatus writes the status the compile step computed for each
// RouterRole whose status changed, and records an event for each condition
// that changed status or reason. A status equal to the one stored is not
// written: the reconcile that follows a write of ours ends without one.
// The roles' writes go out at once: a router runs up to four roles, and
// one after the other they made a reconcile wait four round trips to the
// API server, which at a thousand roles left routers queued behind busy
// workers for seconds.
//
// Writes carry the resourceVersion they were computed from: transition
// times and events are decided against the status last read, so a write
// computed from a stale cache must fail rather than undo a newer one or
// record a transition twice.
func (r *RouterReconciler) writeStatus(ctx context.Context, roles []v1alpha1.RouterRole, out *rolegraph.Output) error {
	var changed []int
	for i := range roles {
		if res := out.RouterRole(roles[i].Name); res != nil && !equality.Semantic.DeepEqual(roles[i].Status, res.Status) {
			changed = append(changed, i)
		}
	}
	errs := make([]error, len(changed))
	write := func(k int) {
		rr := &roles[changed[k]]
		old := rr.DeepCopy()
		rr.Status = out.RouterRole(rr.Name).Status
		if errs[k] = patchStatus(ctx, r.Client, rr, old); errs[k] == nil {
			recordTransitions(r.Recorder, rr, old.Status.Conditions, rr.Status.Conditions, routerRoleEvents)
		}
	}
	if len(changed) == 1 {
		write(0)
	} else {
		var wg sync.WaitGroup
		for k := range changed {
			wg.Go(func() { write(k) })
		}
		wg.Wait()
	}
	stale := false
	var failed []error
	for k, err := range errs {
		switch {
		case errors.Is(err, errStale):
			stale = true
		case err != nil:
			failed = append(failed, fmt.Errorf("writing the status of RouterRole %s: %w", roles[changed[k]].Name, err))
		}
	}
	if len(failed) == 0 && stale {
		return errStale
	}
	return errors.Join(failed...)
}

// patchStatus writes obj's status as a merge patch from old, which
// replaces the lists it sets (conditions included) as a single writer of
// the status wants, under an optimistic lock. An object deleted meanwhile
// needs no status.
func patchStatus(ctx context.Context, c client.Client, obj, old client.Object) error {
	err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return errStale
	}
	return err
}

// retryStale turns a stale status write into a prompt retry: the status
// write of ours that made the cache stale is filtered out of the watch as
// a status-only change, so no event would bring the object back.
func retryStale(ctx context.Context, err error) (ctrl.Result, error) {
	if errors.Is(err, errStale) {
		ctrl.LoggerFrom(ctx).V(1).Info("Status changed since the cache saw it; retrying")
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	return ctrl.Result{}, err
}

// staleRetry is how long the cache gets to catch up with a write.
const staleRetry = 100 * time.Millisecond

// eventPolicy says which condition transitions are worth an event and what
// action they report.
type eventPolicy map[v1alpha1.ConditionType]string

// routerRoleEvents: Ready only sums the others up, so it has no events of
// its own.
var routerRoleEvents = eventPolicy{
	v1alpha1.ConditionAccepted:     "Compile",
	v1alpha1.ConditionResolvedRefs: "Resolve",
	v1alpha1.ConditionProgrammed:   "Program",
}

var hintPolicyEvents = eventPolicy{
	v1alpha1.ConditionAccepted: "Compile",
}

// recordTransitions records one event per condition whose status or reason
// changed. A condition seen for the first time with status True is the
// quiet, expected start and records nothing, except Programmed, whose
// first True is news worth a line. A first Programmed=False that only
// waits for the router pods (Pending) is an expected start too, and
// records nothing.
func recordTransitions(rec events.EventRecorder, obj runtime.Object, before, after []metav1.Condition, policy eventPolicy) {
	if rec == nil {
		return
	}
	for _, c := range after {
		action, ok := policy[v1alpha1.ConditionType(c.Type)]
		if !ok {
			continue
		}
		prev := meta.FindStatusCondition(before, c.Type)
		switch {
		case prev != nil && prev.Status == c.Status && prev.Reason == c.Reason:
			continue
		case prev == nil && c.Status == metav1.ConditionTrue && c.Type != string(v1alpha1.ConditionProgrammed):
			continue
		case prev == nil && c.Type == string(v1alpha1.ConditionProgrammed) && c.Reason == string(v1alpha1.ReasonPending):
			// A new role waits for its router pods to report the config:
			// the expected start, not news. At scale this event was one
			// API write per role on top of the two status writes.
			continue
		}
		rec.Eventf(obj, nil, eventType(c), c.Reason, action, "%s", c.Message)
	}
}

// eventType is Warning for a condition that needs a person: a spec or a
// reference that is wrong, a ConfigMap in the way, or a config its
// router's rollout rolled back. Waiting for router pods is Normal.
func eventType(c metav1.Condition) string {
	switch {
	case c.Status == metav1.ConditionTrue:
		return corev1.EventTypeNormal
	case c.Type == string(v1alpha1.ConditionProgrammed) && c.Reason != string(v1alpha1.ReasonConfigMapConflict) && c.Reason != string(v1alpha1.ReasonRolledBack):
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}
