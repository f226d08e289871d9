package controllers_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamopolicy"
)

// TestReleasedPolicyFileForm: a router whose declared catalog says its
// build reads the released form (policyFileForm: RouterWideHint) gets a
// ConfigMap whose hints.yaml is in that form: roles naming instances, one
// kv_hint_policy for the router, the form named beside it for the
// sidecar. A change that gives one role a hint policy of its own is
// refused with PolicyFormCannotCarry, and the ConfigMap keeps the last
// good file.
func TestReleasedPolicyFileForm(t *testing.T) {
	ns := newNamespace(t)
	decl := strings.Replace(readFile(t, customRouterCatalog), "kind: PolicyCatalog\n", "kind: PolicyCatalog\npolicyFileForm: RouterWideHint\n", 1)
	create(t, catalogConfigMap(t, ns, "released-catalog", "released", decl))

	decode := newRole(ns, "decode", "released", "decode", "kv-share")
	decode.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": 128})}
	prefill := newRole(ns, "prefill", "released", "prefill", "dynamo-default-cost-fn")
	prefill.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": 128})}
	create(t, decode, prefill)

	waitCondition(t, prefill, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	cm := waitConfigMap(t, ns, "released", func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "kv_hint_policy:") || !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "prefill: default") {
			return fmt.Errorf("hints.yaml is not the released form of both roles yet:\n%s", cm.Data[v1alpha1.HintsConfigKey])
		}
		return nil
	})
	const want = `kv_hint_policy:
  parameters:
    max_blocks: 128
  type: harness_prefetch
worker_selection:
  decode: decode
  instances:
  - name: decode
    parameters:
      shared_cache_multiplier: 0.5
    type: kv-share
  prefill: default
`
	if got := cm.Data[v1alpha1.HintsConfigKey]; got != want {
		t.Errorf("hints.yaml:\n%s\nwant:\n%s", got, want)
	}
	if err := dynamopolicy.CheckReleased([]byte(cm.Data[v1alpha1.HintsConfigKey])); err != nil {
		t.Errorf("a released Frontend would refuse it: %v", err)
	}
	if got := cm.Data["policy-file-form"]; got != "RouterWideHint" {
		t.Errorf("policy-file-form is %q, want RouterWideHint", got)
	}
	hash := cm.Annotations[v1alpha1.HashAnnotation]

	update(t, prefill, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": 64})}
	})
	for _, rr := range []*v1alpha1.RouterRole{prefill, decode} {
		waitConditionMessage(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonPolicyFormCannotCarry,
			`role prefill runs [harness_prefetch {"max_blocks":64}], role decode runs [harness_prefetch {"max_blocks":128}]`)
	}
	if got := get(t, ns, v1alpha1.HintsConfigMapName("released"), &corev1.ConfigMap{}); got.Annotations[v1alpha1.HashAnnotation] != hash {
		t.Errorf("the ConfigMap changed (hash %s, was %s):\n%s", got.Annotations[v1alpha1.HashAnnotation], hash, got.Data[v1alpha1.HintsConfigKey])
	}
}
