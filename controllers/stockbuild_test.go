package controllers_test

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestRestartModeStockBuild: a restart-mode router that declares no
// catalog runs a stock Dynamo Frontend, which links no KV-hint policy and
// none of kvhint's own worker-selection types. Its role that lists
// kv-retain is refused with UnknownHintType (the Frontend would not start
// on the kv_hint_policy it needs), its role on a stock type with no hints
// is accepted, and the file written is one Dynamo's own checks start a
// stock Frontend on. Declaring the router's build (a catalog that lists
// kv-retain) accepts the role, and the file then carries it as the
// router's one kv_hint_policy, which both roles list.
func TestRestartModeStockBuild(t *testing.T) {
	ns := newNamespace(t)
	labels := map[string]string{v1alpha1.RouterLabel: "stock", "app": "stock"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stock-frontend", Labels: labels,
			Annotations: map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "frontend", Image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0",
				Args: []string{"--router-mode", "kv"},
			}}}},
		},
	}
	decode := newRole(ns, "decode", "stock", "decode", "dynamo-default-cost-fn")
	decode.Spec.Hints = []v1alpha1.HintItem{inline("kv-retain", map[string]any{"ttl_seconds": 120})}
	prefill := newRole(ns, "prefill", "stock", "prefill", "dynamo-two-tier-cost-fn")
	prefill.Spec.Hints = []v1alpha1.HintItem{}
	create(t, dep, decode, prefill)

	c := waitCondition(t, decode, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonUnknownHintType)
	if !strings.Contains(c.Message, `"kv-retain" is not linked into a stock Dynamo build`) {
		t.Errorf("the message does not say the build does not link the type: %s", c.Message)
	}
	waitCondition(t, prefill, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	cat := builtin.NewCatalog()
	startsOn := func(wantHintPolicy bool) func(cm *corev1.ConfigMap) error {
		return func(cm *corev1.ConfigMap) error {
			doc := cm.Data[v1alpha1.HintsConfigKey]
			if !strings.Contains(doc, "prefill: prefill") {
				return fmt.Errorf("the prefill role is not written yet:\n%s", doc)
			}
			if got := strings.Contains(doc, "kv_hint_policy"); got != wantHintPolicy {
				return fmt.Errorf("kv_hint_policy written: %v, want %v:\n%s", got, wantHintPolicy, doc)
			}
			if wantHintPolicy {
				return nil
			}
			if _, probs := hintsconfig.CompileFor(cat, []byte(doc), hintsconfig.TargetDynamo, hintsconfig.Modes{}); probs.HasErrors() {
				return fmt.Errorf("a stock Frontend refuses the file: %v\n%s", probs, doc)
			}
			return nil
		}
	}
	waitConfigMap(t, ns, "stock", startsOn(false))

	create(t, catalogConfigMap(t, ns, "stock-catalog", "stock", `apiVersion: hints.kvrouter.io/v1alpha1
kind: PolicyCatalog
metadata:
  name: stock-plus-retain
workerSelections:
  - type: dynamo-default-cost-fn
    parameters: {type: object}
  - type: dynamo-two-tier-cost-fn
    parameters: {type: object}
hints:
  - type: kv-retain
    parameters:
      type: object
      properties:
        ttl_seconds: {type: integer, minimum: 1}
`))
	// The released form carries one kv_hint_policy, which every KV role
	// runs: the prefill role now lists it too.
	update(t, prefill, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = decode.Spec.Hints })
	waitCondition(t, decode, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	waitConfigMap(t, ns, "stock", startsOn(true))
}
