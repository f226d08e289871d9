package controllers_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestArgoCDHealthDynamoGraphDeployment runs config/argocd's health
// check for Dynamo's DynamoGraphDeployment, as Argo CD runs it, over the
// status Dynamo's operator writes (status.observedGeneration, state, the
// Ready condition).
func TestArgoCDHealthDynamoGraphDeployment(t *testing.T) {
	dgd := func(generation int64, status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
			"metadata": map[string]any{"name": "llama", "namespace": "serving", "generation": generation},
		}}
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	ready := func(st, reason, msg string) []any {
		return []any{map[string]any{"type": "Ready", "status": st, "reason": reason, "message": msg}}
	}
	for _, tc := range []struct {
		name        string
		obj         *unstructured.Unstructured
		status, msg string
	}{
		{"no status yet", dgd(1, nil), "Progressing", "Waiting for Dynamo's operator to process generation 1"},
		{"generation not processed", dgd(3, map[string]any{"observedGeneration": int64(2), "state": "successful", "conditions": ready("True", "all_resources_are_ready", "All resources are ready")}),
			"Progressing", "Waiting for Dynamo's operator to process generation 3"},
		{"ready", dgd(3, map[string]any{"observedGeneration": int64(3), "state": "successful", "conditions": ready("True", "all_resources_are_ready", "All resources are ready")}),
			"Healthy", "All resources are ready"},
		{"rolling", dgd(3, map[string]any{"observedGeneration": int64(3), "state": "pending", "conditions": ready("False", "rolling_update_in_progress", "Frontend: 1/3 updated")}),
			"Progressing", "rolling_update_in_progress: Frontend: 1/3 updated"},
		{"failed", dgd(3, map[string]any{"observedGeneration": int64(3), "state": "failed", "conditions": ready("False", "pods_not_ready", "Frontend: CrashLoopBackOff")}),
			"Degraded", "failed: pods_not_ready: Frontend: CrashLoopBackOff"},
		{"no Ready condition", dgd(1, map[string]any{"observedGeneration": int64(1), "state": "initializing"}),
			"Progressing", "Waiting for the Ready condition (state initializing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, msg := argoHealth(t, tc.obj)
			if st != tc.status || msg != tc.msg {
				t.Errorf("health %s %q, want %s %q", st, msg, tc.status, tc.msg)
			}
		})
	}
}
