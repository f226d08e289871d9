package gitops_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvrouter/kv-hint-operator/internal/testing/argocd"
)

// TestRouterRolloutHealth runs health-routerrollout.lua as Argo CD runs it
// on a RouterRollout in each of its states, and keeps argocd-cm.yaml's
// copy of it equal to the script.
func TestRouterRolloutHealth(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "config", "argocd", "health-routerrollout.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if argoCM(t).Data["resource.customizations.health.hints.kvrouter.io_RouterRollout"] != string(script) {
		t.Error("argocd-cm.yaml key resource.customizations.health.hints.kvrouter.io_RouterRollout differs from health-routerrollout.lua")
	}
	cond := func(typ, status, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "observedGeneration": int64(2)}
	}
	for _, tc := range []struct {
		name       string
		status     map[string]any
		want, what string
	}{
		{"not processed", map[string]any{"observedGeneration": int64(1)}, "Progressing", "generation 2"},
		{"idle", map[string]any{"observedGeneration": int64(2), "conditions": []any{
			cond("Ready", "True", "Idle", "no candidate staged"),
		}}, "Healthy", "no candidate staged"},
		{"step", map[string]any{"observedGeneration": int64(2), "conditions": []any{
			cond("Progressing", "True", "Step", "step 2/3 (canary 10%): 3 of 3 pods on candidate 0123456789abcdef"),
			cond("Ready", "False", "CandidateInFlight", "step 2/3"),
			cond("Reconciling", "True", "Step", "step 2/3 (canary 10%): 3 of 3 pods on candidate 0123456789abcdef"),
		}}, "Progressing", "Step: step 2/3 (canary 10%)"},
		{"inconclusive", map[string]any{"observedGeneration": int64(2), "conditions": []any{
			cond("Paused", "True", "Inconclusive", "too few samples"),
			cond("Ready", "False", "CandidateInFlight", "step 1/3"),
			cond("Reconciling", "True", "Inconclusive", "too few samples"),
		}}, "Suspended", "Inconclusive: too few samples"},
		{"rolled back", map[string]any{"observedGeneration": int64(2), "conditions": []any{
			cond("RolledBack", "True", "PrefixHitDrop", "candidate rolled back"),
			cond("Ready", "False", "RolledBack", "candidate rolled back"),
			cond("Stalled", "True", "PrefixHitDrop", "candidate rolled back"),
		}}, "Degraded", "PrefixHitDrop: candidate rolled back"},
		{"promoted", map[string]any{"observedGeneration": int64(2), "conditions": []any{
			cond("Promoted", "True", "Promoted", "stable config 0123456789abcdef runs on 3 of 3 pods"),
			cond("Ready", "True", "Promoted", "stable config 0123456789abcdef runs on 3 of 3 pods"),
		}}, "Healthy", "runs on 3 of 3 pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "hints.kvrouter.io/v1alpha1", "kind": "RouterRollout",
				"metadata": map[string]any{"name": "r", "namespace": "ns", "generation": int64(2)},
				"status":   tc.status,
			}}
			got, msg, err := argocd.Health(filepath.Join("..", "..", "config", "argocd"), u)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || !strings.Contains(msg, tc.what) {
				t.Errorf("health %s (%q), want %s with %q", got, msg, tc.want, tc.what)
			}
		})
	}
}
