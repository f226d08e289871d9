package controllers_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestPresetOverridesParametersCondition: a restart-mode router whose
// Dynamo 1.7 Frontend (by its image tag) sets --agentic makes its KV role
// on the default cost function Accepted with reason
// PresetOverridesParameters, not silence; the role's annotation naming
// Dynamo 1.6, which has no presets, takes that back.
func TestPresetOverridesParametersCondition(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "decode", "agentic", "decode", "dynamo-default-cost-fn")
	labels := map[string]string{v1alpha1.RouterLabel: "agentic", "app": "agentic"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agentic-frontend", Labels: labels,
			Annotations: map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "frontend", Image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0",
				Args: []string{"--router-mode", "kv", "--agentic"},
			}}}},
		},
	}
	create(t, dep, rr)
	waitConditionMessage(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonPresetOverridesParameters,
		`--agentic of container "frontend" of Deployment agentic-frontend: a Dynamo 1.7 router preset`)

	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Annotations = map[string]string{v1alpha1.DynamoVersionAnnotation: "1.6"}
	})
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)

	// Without the annotation, the router's declared catalog saying 1.6
	// wins over the image's 1.7 tag.
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Annotations = nil })
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonPresetOverridesParameters)
	create(t, catalogConfigMap(t, ns, "agentic-catalog", "agentic", "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\n"+
		"dynamoVersion: \"1.6\"\nworkerSelections:\n  - type: dynamo-default-cost-fn\n    parameters: {type: object}\n"))
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
}
