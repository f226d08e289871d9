package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// Winner returns the RouterRollout that runs a router's rollouts among
// those that name it: the oldest, then the one whose name sorts first, as
// for RouterRoles that claim one role; nil when there is none. The others
// are returned too.
func Winner(ros []v1alpha1.RouterRollout) (*v1alpha1.RouterRollout, []*v1alpha1.RouterRollout) {
	if len(ros) == 0 {
		return nil, nil
	}
	sorted := make([]*v1alpha1.RouterRollout, len(ros))
	for i := range ros {
		sorted[i] = &ros[i]
	}
	slices.SortFunc(sorted, func(a, b *v1alpha1.RouterRollout) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return sorted[0], sorted[1:]
}

// Conflicted returns the status of a RouterRollout that does nothing
// because winner runs its router's rollouts.
func Conflicted(ro, winner *v1alpha1.RouterRollout, now metav1.Time) v1alpha1.RouterRolloutStatus {
	st := *ro.Status.DeepCopy()
	st.ObservedGeneration = ro.Generation
	msg := fmt.Sprintf("RouterRollout %s, older, runs the rollouts of router %s: this one does nothing; delete one of them", winner.Name, ro.Spec.Router)
	for _, t := range []v1alpha1.ConditionType{v1alpha1.ConditionReady, v1alpha1.ConditionStalled} {
		status := metav1.ConditionFalse
		if t == v1alpha1.ConditionStalled {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: string(t), Status: status, Reason: string(v1alpha1.ReasonRolloutConflict),
			Message: msg, ObservedGeneration: ro.Generation, LastTransitionTime: now})
	}
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c metav1.Condition) bool {
		return !strings.EqualFold(c.Type, string(v1alpha1.ConditionReady)) && !strings.EqualFold(c.Type, string(v1alpha1.ConditionStalled))
	})
	return st
}
