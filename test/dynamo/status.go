package dynamo

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// graphStatus is the status of a graph whose components (in spec order)
// are rendered into deps, which hold the Deployments as last read or
// written; old names, by component, the objects of an earlier worker hash
// still in service. It starts from the graph's current status so that a
// condition's lastTransitionTime moves only when its status flips.
//
// Ready carries the graph's generation as observedGeneration, as Dynamo's
// operator writes it, with Dynamo's reasons: all_resources_are_ready;
// rolling_update_in_progress while old workers serve beside new ones;
// else some_resources_are_not_ready, the message naming each component
// and why.
func graphStatus(dgd *v1beta1.DynamoGraphDeployment, deps []*appsv1.Deployment, old map[string][]string) v1beta1.DynamoGraphDeploymentStatus {
	st := v1beta1.DynamoGraphDeploymentStatus{
		ObservedGeneration: dgd.Generation,
		Conditions:         slices.Clone(dgd.Status.Conditions),
	}
	var msgs []string
	failed := false
	for i := range dgd.Spec.Components {
		comp := &dgd.Spec.Components[i]
		dep := deps[i]
		if st.Components == nil {
			st.Components = map[string]v1beta1.ComponentReplicaStatus{}
		}
		ready, available := dep.Status.ReadyReplicas, dep.Status.AvailableReplicas
		st.Components[comp.ComponentName] = v1beta1.ComponentReplicaStatus{
			ComponentKind:     v1beta1.ComponentKindDeployment,
			ComponentNames:    append(slices.Clone(old[comp.ComponentName]), dep.Name),
			Replicas:          dep.Status.Replicas,
			UpdatedReplicas:   dep.Status.UpdatedReplicas,
			ReadyReplicas:     &ready,
			AvailableReplicas: &available,
		}
		reason, msg, dead := componentReadiness(comp, dep)
		if reason == "" {
			continue
		}
		failed = failed || dead
		msgs = append(msgs, comp.ComponentName+": "+msg)
	}

	cond := metav1.Condition{
		Type:               v1beta1.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             v1beta1.ReasonAllResourcesReady,
		Message:            "All resources are ready",
		ObservedGeneration: dgd.Generation,
	}
	st.State = v1beta1.DGDStateSuccessful
	if len(msgs) > 0 || len(old) > 0 {
		cond.Status = metav1.ConditionFalse
		cond.Reason = v1beta1.ReasonSomeResourcesNotReady
		if len(old) > 0 {
			cond.Reason = v1beta1.ReasonRollingUpdate
		}
		cond.Message = strings.Join(msgs, "; ")
		st.State = v1beta1.DGDStatePending
		if failed {
			st.State = v1beta1.DGDStateFailed
		}
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

// componentReadiness says why a component's Deployment is not rolled out
// and ready (reason empty when it is), and whether the Deployment gave up
// (its progress deadline passed).
func componentReadiness(comp *v1beta1.DynamoComponentDeploymentSharedSpec, dep *appsv1.Deployment) (reason, msg string, dead bool) {
	want := defaultReplicas
	if comp.Replicas != nil {
		want = *comp.Replicas
	}
	s := dep.Status
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return v1beta1.ReasonPodsNotReady, fmt.Sprintf("Deployment %s exceeded its progress deadline: %s", dep.Name, c.Message), true
		}
	}
	switch {
	case s.ObservedGeneration < dep.Generation:
		return v1beta1.ReasonUpdating, fmt.Sprintf("Deployment %s generation %d not yet observed", dep.Name, dep.Generation), false
	case s.UpdatedReplicas != want || s.Replicas != want:
		return v1beta1.ReasonUpdating, fmt.Sprintf("%d/%d updated, %d replicas", s.UpdatedReplicas, want, s.Replicas), false
	case s.ReadyReplicas != want:
		return v1beta1.ReasonPodsNotReady, fmt.Sprintf("%d/%d ready", s.ReadyReplicas, want), false
	}
	return "", "", false
}
