package gitops_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/internal/testing/argocd"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// argoCM is config/argocd/argocd-cm.yaml, the snippet docs/gitops.md
// tells Argo CD users to merge into their argocd-cm.
func argoCM(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "argocd", "argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(data, cm); err != nil {
		t.Fatalf("argocd-cm.yaml: %v", err)
	}
	return cm
}

// TestArgoCDConfigMapSnippet keeps config/argocd/argocd-cm.yaml, the
// snippet docs/gitops.md tells Argo CD users to install, equal to the scripts
// the tests run, and installs it the way that page says.
func TestArgoCDConfigMapSnippet(t *testing.T) {
	env := testenv.Get(t)
	cm := argoCM(t)
	for key, file := range map[string]string{
		"resource.customizations.health.hints.kvrouter.io_RouterRole":     "health-routerrole.lua",
		"resource.customizations.health.hints.kvrouter.io_HintPolicy":     "health-hintpolicy.lua",
		"resource.customizations.health.nvidia.com_DynamoGraphDeployment": "health-dynamographdeployment.lua",
	} {
		script, err := os.ReadFile(filepath.Join("..", "..", "config", "argocd", file))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[key] != string(script) {
			t.Errorf("argocd-cm.yaml key %s differs from %s; regenerate the snippet from the script", key, file)
		}
	}

	// The install command of docs/gitops.md merges the keys into an existing
	// argocd-cm and keeps what it held.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	existing := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "argocd-cm"}, Data: map[string]string{"url": "https://argocd.example.com"}}
	testenv.Create(t, env.Client, existing)
	if out, err := env.RunKubectl("-n", "argocd", "patch", "configmap", "argocd-cm", "--patch-file", filepath.Join("..", "..", "config", "argocd", "argocd-cm.yaml")); err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, out)
	}
	patched := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "argocd", Name: "argocd-cm"}, patched); err != nil {
		t.Fatal(err)
	}
	for key, want := range cm.Data {
		if patched.Data[key] != want {
			t.Errorf("after kubectl patch, argocd-cm key %s is %q", key, patched.Data[key])
		}
	}
	if patched.Data["url"] != "https://argocd.example.com" {
		t.Errorf("kubectl patch lost the existing data: %v", patched.Data)
	}
}

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
			st, msg, err := argocd.Health(filepath.Join("..", "..", "config", "argocd"), tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if st != tc.status || msg != tc.msg {
				t.Errorf("health %s %q, want %s %q", st, msg, tc.status, tc.msg)
			}
		})
	}
}
