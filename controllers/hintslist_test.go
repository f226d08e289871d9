package controllers_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestHintsAbsentVersusEmpty checks that "no hints key" (the selection's
// defaults) and "hints: []" (none) survive the API server and mean what
// they say.
func TestHintsAbsentVersusEmpty(t *testing.T) {
	ns := newNamespace(t)
	defaults := newRole(ns, "defaults", "lists", "decode", "kvcr")
	none := newRole(ns, "none", "lists", "prefill", "dynamo-default-cost-fn")
	none.Spec.Hints = []v1alpha1.HintItem{}
	create(t, defaults, none)

	waitCondition(t, defaults, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	waitCondition(t, none, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	if defaults.Spec.Hints != nil {
		t.Errorf("absent hints read back as %#v", defaults.Spec.Hints)
	}
	if none.Spec.Hints == nil || len(none.Spec.Hints) != 0 {
		t.Errorf("hints: [] read back as %#v", none.Spec.Hints)
	}
	var types []string
	for _, h := range defaults.Status.EffectiveHints {
		types = append(types, h.Type)
	}
	if len(types) != 2 || types[0] != "kv-fetch" || types[1] != "kv-evict" {
		t.Errorf("effectiveHints of kvcr's defaults: %v; want [kv-fetch kv-evict]", types)
	}
	if len(none.Status.EffectiveHints) != 0 {
		t.Errorf("effectiveHints with hints: []: %+v; want none", none.Status.EffectiveHints)
	}
}
