package dynamograph

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestReadyStatus: the Ready condition's status, among others, or empty.
func TestReadyStatus(t *testing.T) {
	for want, status := range map[string]any{
		"True":  map[string]any{"conditions": []any{map[string]any{"type": "Other", "status": "False"}, map[string]any{"type": ConditionReady, "status": "True"}}},
		"False": map[string]any{"conditions": []any{map[string]any{"type": ConditionReady, "status": "False"}}},
		"":      map[string]any{"conditions": []any{map[string]any{"type": "Other", "status": "True"}}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
		if got := ReadyStatus(u); got != want {
			t.Errorf("ReadyStatus(%v) = %q; want %q", status, got, want)
		}
	}
	if got := ReadyStatus(&unstructured.Unstructured{Object: map[string]any{}}); got != "" {
		t.Errorf("no status: %q", got)
	}
}
