package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// writeStatus writes the status the compile step computed for each
// RouterRole whose status changed, and records an event for each condition
// that changed status or reason. A status equal to the one stored is not
// written: the reconcile that follows a write of ours ends without one.
func (r *RouterReconciler) writeStatus(ctx context.Context, roles []v1alpha1.RouterRole, out *rolegraph.Output) error {
	var errs []error
	for i := range roles {
		rr := &roles[i]
		res := out.RouterRole(rr.Name)
		if res == nil || equality.Semantic.DeepEqual(rr.Status, res.Status) {
			continue
		}
		old := rr.DeepCopy()
		rr.Status = res.Status
		// A merge patch replaces the lists it sets, conditions included,
		// which is what a single writer of this status wants.
		if err := r.Client.Status().Patch(ctx, rr, client.MergeFrom(old)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("writing the status of RouterRole %s: %w", rr.Name, err))
			}
			continue
		}
		recordTransitions(r.Recorder, rr, old.Status.Conditions, rr.Status.Conditions, routerRoleEvents)
	}
	return errors.Join(errs...)
}

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
// first True is news worth a line.
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
		}
		rec.Eventf(obj, nil, eventType(c), c.Reason, action, "%s", c.Message)
	}
}

// eventType is Warning for a condition that needs a person: a spec or a
// reference that is wrong. Waiting for router pods is Normal.
func eventType(c metav1.Condition) string {
	if c.Status == metav1.ConditionTrue || c.Type == string(v1alpha1.ConditionProgrammed) {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}
