package controllers_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestLastGoodKept makes a running role invalid: the router keeps its last
// accepted entry, the ConfigMap is not written, Programmed stays True for
// the generation that runs, and Accepted and Ready say why the new one does
// not. One Warning event marks the transition, not one per reconcile.
func TestLastGoodKept(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "llama", "decode", "dynamo-default-cost-fn")
	rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("kv-retain", map[string]any{"ttl_seconds": 600})}
	testenv.Create(t, k8s, rr)
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "llama", nil)
	hash := cm.Annotations[v1alpha1.HashAnnotation]
	pod := testenv.CreateRouterPod(t, k8s, ns, "llama", "llama-router-0", hash)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})

	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("kv-retain", map[string]any{"ttl_seconds": 0})}
	})
	accepted := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidParameters)})
	if want := `spec.hints[0] (kv-retain): parameter "ttl_seconds": 0 is out of range 1..86400. The router keeps running generation 1`; accepted.Message != want {
		t.Errorf("Accepted message:\n  %s\nwant:\n  %s", accepted.Message, want)
	}
	programmed := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), Generation: testenv.AnyGeneration})
	if programmed.ObservedGeneration != 1 || !strings.Contains(programmed.Message, "generation 1, the last accepted; generation 2 is not accepted") {
		t.Errorf("Programmed is for generation %d: %q; want generation 1, saying that generation 2 is not accepted", programmed.ObservedGeneration, programmed.Message)
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidParameters)})
	if got := rr.Status.EffectiveHints; len(got) != 1 || !strings.Contains(string(got[0].Parameters.Raw), `"ttl_seconds":600`) {
		t.Errorf("effectiveHints %+v; want the kv-retain of generation 1, ttl_seconds 600", got)
	}
	after := get(t, ns, cm.Name, cm.DeepCopy())
	if after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the ConfigMap was written (resourceVersion %s -> %s) though its content did not change", cm.ResourceVersion, after.ResourceVersion)
	}

	// Another pod report recomputes the status without a transition of
	// Accepted: still a single event.
	testenv.CreateRouterPod(t, k8s, ns, "llama", "llama-router-1", hash)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), MessageContains: "2/2 router pods", Generation: testenv.AnyGeneration})
	testenv.Eventually(t, timeout, "one InvalidParameters event", func(ctx context.Context) error {
		n, err := countEvents(ctx, ns, rr.Name, string(v1alpha1.ReasonInvalidParameters))
		if err == nil && n != 1 {
			err = fmt.Errorf("%d events", n)
		}
		return err
	})

	// Fixed: the new generation runs once the pods report its hash.
	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("kv-retain", map[string]any{"ttl_seconds": 1200})}
	})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	cm = testenv.WaitConfigMap(t, k8s, timeout, ns, "llama", func(cm *corev1.ConfigMap) error {
		if cm.Annotations[v1alpha1.HashAnnotation] == hash {
			return fmt.Errorf("hash still %s", hash)
		}
		return nil
	})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/2 router pods", Generation: testenv.AnyGeneration})
	testenv.ReportHash(t, k8s, pod, cm.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "1/2 router pods", Generation: testenv.AnyGeneration})
}

// TestLastGoodSurvivesRestart stops the manager, makes a running role
// invalid while no manager runs, and starts a new one: with no memory of
// the old spec, it finds the last accepted entry in the ConfigMap.
func TestLastGoodSurvivesRestart(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "prefill", "llama", "prefill", "kvcr")
	testenv.Create(t, k8s, rr)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	before := testenv.WaitConfigMap(t, k8s, timeout, ns, "llama", withConfig(func(cfg *hintsconfig.Config) error {
		if _, ok := cfg.WorkerSelection["prefill"]; !ok {
			return fmt.Errorf("no prefill entry")
		}
		return nil
	}))

	stopManager()
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.WorkerSelection.Type = "kv-oracle" })
	var err error
	if stopManager, err = startManager(); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}

	c := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonUnknownWorkerSelection)})
	if !strings.Contains(c.Message, "keeps running generation 1") {
		t.Errorf("Accepted message %q; want it to say generation 1 keeps running", c.Message)
	}
	after := get(t, ns, before.Name, before.DeepCopy())
	for _, key := range []string{v1alpha1.HintsConfigKey, v1alpha1.RolesKey} {
		if after.Data[key] != before.Data[key] {
			t.Errorf("the compiled %s changed across the restart:\n%s\nbecame\n%s", key, before.Data[key], after.Data[key])
		}
	}
	if got, want := after.Annotations[v1alpha1.HashAnnotation], before.Annotations[v1alpha1.HashAnnotation]; got != want {
		t.Errorf("the hash changed across the restart: %s became %s", want, got)
	}
}

// countEvents counts the events.k8s.io Events about one object with a
// reason. The recorder folds a repeat of an event into a series on the
// first Event rather than creating another, so a repeat counts as one
// more.
func countEvents(ctx context.Context, ns, name, reason string) (int, error) {
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			n++
			if e.Series != nil {
				n += int(e.Series.Count) - 1
			}
		}
	}
	return n, nil
}

// TestReleasedPolicyFileForm: a router whose declared catalog says its
// build reads the released form (policyFileForm: RouterWideHint) gets a
// ConfigMap whose hints.yaml is in that form: roles naming instances, one
// kv_hint_policy for the router, the form named beside it for the
// sidecar. A change that gives one role a hint policy of its own is
// refused with PolicyFormCannotCarry, and the ConfigMap keeps the last
// good file.
func TestReleasedPolicyFileForm(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	decl := strings.Replace(readFile(t, customRouterCatalog), "kind: PolicyCatalog\n", "kind: PolicyCatalog\npolicyFileForm: RouterWideHint\n", 1)
	testenv.Create(t, k8s, catalogConfigMap(t, ns, "released-catalog", "released", decl))

	decode := newRole(ns, "decode", "released", "decode", "kv-share")
	decode.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": 128})}
	prefill := newRole(ns, "prefill", "released", "prefill", "dynamo-default-cost-fn")
	prefill.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": 128})}
	testenv.Create(t, k8s, decode, prefill)

	testenv.WaitCondition(t, k8s, timeout, prefill, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "released", func(cm *corev1.ConfigMap) error {
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
		rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": 64})}
	})
	for _, rr := range []*v1alpha1.RouterRole{prefill, decode} {
		testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted),
			testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPolicyFormCannotCarry), MessageContains: `role prefill runs [harness_prefetch {"max_blocks":64}], role decode runs [harness_prefetch {"max_blocks":128}]`})
	}
	if got := get(t, ns, v1alpha1.HintsConfigMapName("released"), &corev1.ConfigMap{}); got.Annotations[v1alpha1.HashAnnotation] != hash {
		t.Errorf("the ConfigMap changed (hash %s, was %s):\n%s", got.Annotations[v1alpha1.HashAnnotation], hash, got.Data[v1alpha1.HintsConfigKey])
	}
}

// TestPolicyRefResolution follows a RouterRole through the life of the
// HintPolicy it references: missing, created, changed, made invalid,
// fixed and deleted. Each change recompiles the role without touching it.
func TestPolicyRefResolution(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "chat-decode", "chat", "decode", "dynamo-default-cost-fn")
	rr.Spec.Hints = []v1alpha1.HintItem{testenv.PolicyRef("session-retain"), testenv.Hint("kv-evict", nil)}
	testenv.Create(t, k8s, rr)

	// Missing: nothing can be checked, nothing runs.
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionResolvedRefs), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonHintPolicyNotFound)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonUnresolvedRefs)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNotAccepted), Generation: testenv.AnyGeneration})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "chat", withoutRole("decode"))

	// Created: the role resolves and compiles with the policy's parameters.
	hp := testenv.HintPolicy(ns, "session-retain", "kv-retain", map[string]any{"ttl_seconds": 600})
	testenv.Create(t, k8s, hp)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionResolvedRefs), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonResolvedRefs)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 600) }))
	waitUsedBy(t, hp, "chat-decode")

	// Changed: the compiled config follows.
	update(t, hp, func(hp *v1alpha1.HintPolicy) {
		hp.Spec.Parameters = testenv.Params(map[string]any{"ttl_seconds": 1800})
	})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 1800) }))
	testenv.WaitCondition(t, k8s, timeout, hp, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})

	// Made invalid: both objects say so, and the router keeps what ran.
	update(t, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = testenv.Params(map[string]any{"ttl_seconds": 0}) })
	testenv.WaitCondition(t, k8s, timeout, hp, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidParameters)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionResolvedRefs), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonHintPolicyInvalid)})
	c := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidParameters)})
	if !strings.Contains(c.Message, "HintPolicy session-retain") || !strings.Contains(c.Message, "keeps running generation 1") {
		t.Errorf("Accepted message %q; want it to name the HintPolicy and the generation that keeps running", c.Message)
	}
	testenv.WaitConfigMap(t, k8s, timeout, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 1800) }))

	// Fixed.
	update(t, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = testenv.Params(map[string]any{"ttl_seconds": 900}) })
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionResolvedRefs), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonResolvedRefs)})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 900) }))

	// Deleted: the reference no longer resolves; the last good entry stays.
	if err := k8s.Delete(context.Background(), hp); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionResolvedRefs), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonHintPolicyNotFound)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonUnresolvedRefs)})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 900) }))

	// The role stops referencing it: usedBy of another policy follows.
	other := testenv.HintPolicy(ns, "evict", "kv-evict", nil)
	testenv.Create(t, k8s, other)
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = []v1alpha1.HintItem{testenv.PolicyRef("evict")} })
	waitUsedBy(t, other, "chat-decode")
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("kv-evict", nil)} })
	waitUsedBy(t, other)
}

func waitUsedBy(t *testing.T, hp *v1alpha1.HintPolicy, want ...string) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("HintPolicy %s used by %v", hp.Name, want), func(ctx context.Context) error {
		if err := k8s.Get(ctx, keyOf(hp), hp); err != nil {
			return err
		}
		if !slices.Equal(hp.Status.UsedBy, want) {
			return fmt.Errorf("usedBy %v", hp.Status.UsedBy)
		}
		return nil
	})
}

// withConfig checks the compiled config a ConfigMap carries, read the way
// the sidecar reads it.
// withConfig checks the compiled config as a sidecar reads it: hints.yaml
// and roles.yaml decoded together (hints.yaml absent while no role is
// accepted), then check on the policy file.
func withConfig(check func(*hintsconfig.Config) error) func(*corev1.ConfigMap) error {
	return func(cm *corev1.ConfigMap) error {
		dec, err := compiled.Decode(cm.Data)
		if err != nil {
			return err
		}
		if got, want := cm.Annotations[v1alpha1.HashAnnotation], dec.Hash; got != want {
			return fmt.Errorf("hash annotation %q; the data hashes to %q", got, want)
		}
		return check(dec.Parsed)
	}
}

// withoutRole: the role is in neither hints.yaml nor roles.yaml (Decode
// checks they name the same roles).
func withoutRole(role string) func(*corev1.ConfigMap) error {
	return withConfig(func(cfg *hintsconfig.Config) error {
		if _, ok := cfg.WorkerSelection[role]; ok {
			return fmt.Errorf("role %s is in the config", role)
		}
		return nil
	})
}

// retainTTL checks decode's kv-retain ttl_seconds.
func retainTTL(cfg *hintsconfig.Config, want int) error {
	e, ok := cfg.WorkerSelection["decode"]
	if !ok || e.Hints == nil {
		return fmt.Errorf("no decode hints in %+v", cfg.WorkerSelection)
	}
	for _, h := range *e.Hints {
		if h.Type == "kv-retain" {
			if got := fmt.Sprintf(`"ttl_seconds":%d`, want); !strings.Contains(string(h.Parameters), got) {
				return fmt.Errorf("kv-retain parameters %s; want %s", h.Parameters, got)
			}
			return nil
		}
	}
	return fmt.Errorf("decode runs no kv-retain")
}

// TestPresetOverridesParametersCondition: a restart-mode router whose
// Dynamo 1.7 Frontend (by its image tag) sets --agentic makes its KV role
// on the default cost function Accepted with reason
// PresetOverridesParameters, not silence; the role's annotation naming
// Dynamo 1.6, which has no presets, takes that back.
func TestPresetOverridesParametersCondition(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
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
	testenv.Create(t, k8s, dep, rr)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted),
		testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonPresetOverridesParameters), MessageContains: `--agentic of container "frontend" of Deployment agentic-frontend: a Dynamo 1.7 router preset`})

	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Annotations = map[string]string{v1alpha1.DynamoVersionAnnotation: "1.6"}
	})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})

	// Without the annotation, the router's declared catalog saying 1.6
	// wins over the image's 1.7 tag.
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Annotations = nil })
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonPresetOverridesParameters)})
	testenv.Create(t, k8s, catalogConfigMap(t, ns, "agentic-catalog", "agentic", "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\n"+
		"dynamoVersion: \"1.6\"\nworkerSelections:\n  - type: dynamo-default-cost-fn\n    parameters: {type: object}\n"))
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
}

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
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
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
	decode.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("kv-retain", map[string]any{"ttl_seconds": 120})}
	prefill := newRole(ns, "prefill", "stock", "prefill", "dynamo-two-tier-cost-fn")
	prefill.Spec.Hints = []v1alpha1.HintItem{}
	testenv.Create(t, k8s, dep, decode, prefill)

	c := testenv.WaitCondition(t, k8s, timeout, decode, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonUnknownHintType)})
	if !strings.Contains(c.Message, `"kv-retain" is not linked into a stock Dynamo build`) {
		t.Errorf("the message does not say the build does not link the type: %s", c.Message)
	}
	testenv.WaitCondition(t, k8s, timeout, prefill, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
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
	testenv.WaitConfigMap(t, k8s, timeout, ns, "stock", startsOn(false))

	testenv.Create(t, k8s, catalogConfigMap(t, ns, "stock-catalog", "stock", `apiVersion: hints.kvrouter.io/v1alpha1
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
	testenv.WaitCondition(t, k8s, timeout, decode, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "stock", startsOn(true))
}

// customRouterCatalog declares types of a router's own build that the
// manager does not link: kv-share (commits KV copies when
// shared_cache_multiplier > 0), harness_prefetch and peer-pull (both send
// them).
const customRouterCatalog = "../internal/declared/testdata/custom-router.yaml"

func catalogConfigMap(t *testing.T, ns, name, router, text string) *corev1.ConfigMap {
	t.Helper()
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.CatalogForLabel: router}},
		Data:       map[string]string{v1alpha1.CatalogKey: text},
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDeclaredCatalogRules: a router that declares its catalog has its
// roles compiled against it. A role using declared Rust-only types is
// accepted with their schemas, and compiled with their declared defaults;
// an unknown parameter, a value of the wrong type, one out of range and two
// KVCopy senders are refused with the reasons and messages linked plugins
// get. A router without a declaration in the same namespace still knows
// only the linked types.
func TestDeclaredCatalogRules(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	testenv.Create(t, k8s, catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", readFile(t, customRouterCatalog)))

	decode := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	decode.Spec.WorkerSelection.Parameters = testenv.Params(map[string]any{"shared_cache_multiplier": 0.25})
	decode.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": 128})}
	prefill := newRole(ns, "prefill", "dynamo", "prefill", "kv-share")
	prefill.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_block": 64})}
	aggregated := newRole(ns, "aggregated", "dynamo", "aggregated", "kv-share")
	aggregated.Spec.WorkerSelection.Parameters = testenv.Params(map[string]any{"shared_cache_multiplier": 1.5})
	encode := newRole(ns, "encode", "dynamo", "encode", "kv-share")
	encode.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", nil), testenv.Hint("peer-pull", nil)}
	linked := newRole(ns, "linked", "sidecar-router", "decode", "kv-share")
	testenv.Create(t, k8s, decode, prefill, aggregated, encode, linked)

	testenv.WaitCondition(t, k8s, timeout, decode, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "dynamo", func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "harness_prefetch") {
			return fmt.Errorf("hints.yaml does not hold harness_prefetch yet:\n%s", cm.Data[v1alpha1.HintsConfigKey])
		}
		return nil
	})
	if got := cm.Data[v1alpha1.HintsConfigKey]; !strings.Contains(got, "max_blocks: 128") || !strings.Contains(got, "shared_cache_multiplier: 0.25") {
		t.Errorf("hints.yaml does not hold the role's parameters:\n%s", got)
	}

	for _, tc := range []struct {
		rr     *v1alpha1.RouterRole
		reason v1alpha1.ConditionReason
		msg    string
	}{
		{prefill, v1alpha1.ReasonInvalidParameters, `spec.hints[0] (harness_prefetch): parameter "max_block": unknown parameter; known: max_blocks, source`},
		{aggregated, v1alpha1.ReasonInvalidParameters, `spec.workerSelection.parameters (kv-share): worker-selection kv-share: parameter "shared_cache_multiplier": 1.5 is out of range 0..1`},
		{encode, v1alpha1.ReasonKVCopySenderDuplicate, `spec.hints (kv-share): worker-selection kv-share commits KV copies, and 2 hint policies send them (harness_prefetch, peer-pull); keep exactly one`},
		{linked, v1alpha1.ReasonUnknownWorkerSelection, `spec.workerSelection.type (kv-share): worker-selection type "kv-share" is not linked into this build`},
	} {
		c := testenv.WaitCondition(t, k8s, timeout, tc.rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(tc.reason)})
		if !strings.HasPrefix(c.Message, tc.msg) {
			t.Errorf("RouterRole %s Accepted:\n  %s\nwant it to start with:\n  %s", tc.rr.Name, c.Message, tc.msg)
		}
	}

	// A wrong type on the accepted role: refused, and the router keeps the
	// last good entry, checked again by the declared catalog.
	update(t, decode, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": "lots"})}
	})
	c := testenv.WaitCondition(t, k8s, timeout, decode, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidParameters)})
	if want := `spec.hints[0] (harness_prefetch): parameter "max_blocks": "lots" is not an integer. The router keeps running generation 1`; c.Message != want {
		t.Errorf("Accepted:\n  %s\nwant:\n  %s", c.Message, want)
	}
}

// TestDeclaredCatalogLastGood: a declaration that cannot be used, or two
// of them, refuse every role of the router with a reason of their own,
// and the router's ConfigMap is not written: the router keeps its last
// good config, and Programmed still counts the pods that run it.
func TestDeclaredCatalogLastGood(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	good := readFile(t, customRouterCatalog)
	decl := catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", good)
	testenv.Create(t, k8s, decl)
	rr := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	prefill := newRole(ns, "prefill", "dynamo", "prefill", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr, prefill)
	testenv.WaitCondition(t, k8s, timeout, prefill, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "dynamo", func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "prefill:") || !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "decode:") {
			return fmt.Errorf("hints.yaml does not hold both roles yet:\n%s", cm.Data[v1alpha1.HintsConfigKey])
		}
		return nil
	})
	pod0 := testenv.CreateRouterPod(t, k8s, ns, "dynamo", "dynamo-0", cm.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})

	update(t, decl, func(cm *corev1.ConfigMap) {
		cm.Data[v1alpha1.CatalogKey] = strings.Replace(good, "commitsKVCopies: params.shared_cache_multiplier > 0", "commitsKVCopies: params.shared > 0", 1)
	})
	c := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidCatalog)})
	for _, want := range []string{"spec.router (ConfigMap dynamo-catalog): ConfigMap dynamo-catalog declares the catalog of router dynamo, but it cannot be used",
		"workerSelections[1].commitsKVCopies: does not compile", "The router keeps running generation 1"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Accepted message %q does not say %q", c.Message, want)
		}
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), Generation: testenv.AnyGeneration})
	// A change that would rewrite the config (a role goes) waits for a
	// usable declaration too: nothing is written.
	testenv.Eventually(t, timeout, "deleting RouterRole prefill", func(ctx context.Context) error { return k8s.Delete(ctx, prefill) })
	// A second pod is the barrier: the reconcile that counts it comes
	// after the one the delete caused.
	pod1 := testenv.CreateRouterPod(t, k8s, ns, "dynamo", "dynamo-1", cm.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), MessageContains: "2/2 router pods", Generation: testenv.AnyGeneration})
	if after := get(t, ns, cm.Name, &corev1.ConfigMap{}); after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the ConfigMap was written (resourceVersion %s -> %s) while the declaration was broken:\n%s", cm.ResourceVersion, after.ResourceVersion, after.Data[v1alpha1.HintsConfigKey])
	}

	// Fixed: what waited is written (prefill is gone), then declared twice.
	update(t, decl, func(cm *corev1.ConfigMap) { cm.Data[v1alpha1.CatalogKey] = good })
	cm = testenv.WaitConfigMap(t, k8s, timeout, ns, "dynamo", func(cm *corev1.ConfigMap) error {
		if strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "prefill:") {
			return fmt.Errorf("hints.yaml still holds prefill")
		}
		return nil
	})
	testenv.ReportHash(t, k8s, pod0, cm.Annotations[v1alpha1.HashAnnotation])
	testenv.ReportHash(t, k8s, pod1, cm.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})
	testenv.Create(t, k8s, catalogConfigMap(t, ns, "dynamo-catalog-2", "dynamo", good))
	c = testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonCatalogConflict)})
	if want := "2 ConfigMaps declare the catalog of router dynamo (label hints.kvrouter.io/catalog-for=dynamo): dynamo-catalog, dynamo-catalog-2; keep one"; !strings.Contains(c.Message, want) {
		t.Errorf("Accepted message %q does not say %q", c.Message, want)
	}
	if after := get(t, ns, cm.Name, &corev1.ConfigMap{}); after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the ConfigMap was written while two declarations conflicted")
	}
	testenv.Eventually(t, timeout, "deleting the second declaration", func(ctx context.Context) error {
		return k8s.Delete(ctx, catalogConfigMap(t, ns, "dynamo-catalog-2", "dynamo", ""))
	})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})
}

// TestDeclaredHintPolicy: a HintPolicy whose type only a declared catalog
// of its namespace holds is checked against that declaration, and says
// which router's it is; with no declaration the type is unknown.
func TestDeclaredHintPolicy(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	good := testenv.HintPolicy(ns, "prefetch", "harness_prefetch", map[string]any{"max_blocks": 8})
	bad := testenv.HintPolicy(ns, "prefetch-zero", "harness_prefetch", map[string]any{"max_blocks": 0})
	testenv.Create(t, k8s, good, bad)
	testenv.WaitCondition(t, k8s, timeout, good, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonUnknownHintType)})

	testenv.Create(t, k8s, catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", readFile(t, customRouterCatalog)))
	testenv.WaitCondition(t, k8s, timeout, good, string(v1alpha1.ConditionAccepted),
		testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted), MessageContains: "hint policy type harness_prefetch accepts the parameters (declared by the catalog of router dynamo, not linked into the manager)"})
	testenv.WaitCondition(t, k8s, timeout, bad, string(v1alpha1.ConditionAccepted),
		testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidParameters), MessageContains: `checked against the declared catalog of router dynamo: spec.parameters (harness_prefetch): parameter "max_blocks": 0 is out of range 1..4096`})

	// The router's roles resolve references to them with its own catalog.
	rr := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	rr.Spec.Hints = []v1alpha1.HintItem{testenv.PolicyRef("prefetch")}
	testenv.Create(t, k8s, rr)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionResolvedRefs), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonResolvedRefs)})
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "dynamo", nil)
	if got := cm.Data[v1alpha1.HintsConfigKey]; !strings.Contains(got, "max_blocks: 8") {
		t.Errorf("hints.yaml does not run HintPolicy prefetch's parameters:\n%s", got)
	}
}

// TestDeclaredCatalogBrokenAcrossRestart: a manager that starts while a
// router's declaration is broken has no last good declaration to check
// the running entries with: it still writes nothing, and says so; the
// running config and its hash stay as they were, and once the declaration
// is fixed the role is accepted again with the same config.
func TestDeclaredCatalogBrokenAcrossRestart(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	good := readFile(t, customRouterCatalog)
	decl := catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", good)
	testenv.Create(t, k8s, decl)
	rr := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": 32})}
	testenv.Create(t, k8s, rr)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	before := testenv.WaitConfigMap(t, k8s, timeout, ns, "dynamo", nil)
	testenv.CreateRouterPod(t, k8s, ns, "dynamo", "dynamo-0", before.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})

	stopManager()
	update(t, decl, func(cm *corev1.ConfigMap) {
		cm.Data[v1alpha1.CatalogKey] = "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\n"
	})
	var err error
	if stopManager, err = startManager(); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalidCatalog)})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed),
		testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNotAccepted), MessageContains: "ConfigMap dynamo-hints is left as it is, so router pods run what it holds", Generation: testenv.AnyGeneration})
	after := get(t, ns, before.Name, &corev1.ConfigMap{})
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the ConfigMap was written across the restart:\n%s\nbecame\n%s", before.Data[v1alpha1.HintsConfigKey], after.Data[v1alpha1.HintsConfigKey])
	}

	update(t, decl, func(cm *corev1.ConfigMap) { cm.Data[v1alpha1.CatalogKey] = good })
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady)})
	if got := get(t, ns, before.Name, &corev1.ConfigMap{}); got.Annotations[v1alpha1.HashAnnotation] != before.Annotations[v1alpha1.HashAnnotation] {
		t.Errorf("the hash changed: %s became %s", before.Annotations[v1alpha1.HashAnnotation], got.Annotations[v1alpha1.HashAnnotation])
	}
}

// catalogUse returns what the manager's store of declared catalogs holds:
// distinct declarations and their estimated bytes, as its metrics say.
func catalogUse(t *testing.T) (n, bytes float64) {
	t.Helper()
	families, err := managerMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range families {
		switch f.GetName() {
		case controllers.ManagerMetricsNamespace + "_declared_catalogs":
			n = f.GetMetric()[0].GetGauge().GetValue()
			found++
		case controllers.ManagerMetricsNamespace + "_declared_catalog_bytes":
			bytes = f.GetMetric()[0].GetGauge().GetValue()
			found++
		}
	}
	if found != 2 {
		t.Fatalf("the manager exports %d of its two declared-catalog metrics", found)
	}
	return n, bytes
}

// slowCatalog is the custom-router declaration with filler hint types of
// many CEL rules, so that each load takes a while, and a version comment
// that makes each text distinct.
func slowCatalog(t *testing.T, version int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(readFile(t, customRouterCatalog))
	for ty := range 8 {
		fmt.Fprintf(&b, "  - type: filler-%d\n    parameters:\n      type: object\n      properties:\n        a: {type: integer, default: 1}\n      x-kubernetes-validations:\n", ty)
		for r := range 15 {
			fmt.Fprintf(&b, "        - rule: self.a + %d > 0\n", r)
		}
	}
	fmt.Fprintf(&b, "# version %d\n", version)
	return b.String()
}

// TestDeclaredCatalogEditsLeaveNoLoads: a ConfigMap edited again and again
// while its declaration loads (each version's load waits for the one slot
// or runs when the next edit lands), then deleted. Through the manager's
// own watches and reconciles, its store ends holding what it held before:
// no load of an edited-away version is left counting against the budget.
// Before, twelve edits left eleven loads held by nothing, for good, and
// near the budget every new declaration was refused until a restart.
func TestDeclaredCatalogEditsLeaveNoLoads(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	ctx := context.Background()
	baseN, baseBytes := catalogUse(t)
	cm := catalogConfigMap(t, ns, "edited-catalog", "edited", slowCatalog(t, 0))
	rr := newRole(ns, "decode", "edited", "decode", "kv-share")
	rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("harness_prefetch", map[string]any{"max_blocks": 8})}
	testenv.Create(t, k8s, cm, rr)
	const versions = 12
	var most float64
	for v := 1; v <= versions; v++ {
		n, _ := catalogUse(t)
		most = max(most, n-baseN)
		testenv.Eventually(t, timeout, fmt.Sprintf("version %d of the declaration written", v), func(ctx context.Context) error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
				return err
			}
			cm.Data[v1alpha1.CatalogKey] = slowCatalog(t, v)
			return k8s.Update(ctx, cm)
		})
	}
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	testenv.Eventually(t, timeout, "one declaration kept for the last version", func(context.Context) error {
		n, bytes := catalogUse(t)
		if n != baseN+1 || bytes <= baseBytes {
			return fmt.Errorf("%g declarations (%g bytes) kept; before the test %g (%g bytes), want one more", n, bytes, baseN, baseBytes)
		}
		return nil
	})
	_, held := catalogUse(t)
	t.Logf("one declaration of this text is estimated at %.0f bytes; while the edits landed the store held at most %g of its versions", held-baseBytes, most)

	if err := k8s.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the store back to what it held before", func(context.Context) error {
		if n, bytes := catalogUse(t); n != baseN || bytes != baseBytes {
			return fmt.Errorf("%g declarations (%g bytes) kept after the ConfigMap was deleted; want %g (%g bytes), as before", n, bytes, baseN, baseBytes)
		}
		return nil
	})
}

// TestHintsAbsentVersusEmpty checks that "no hints key" (the selection's
// defaults) and "hints: []" (none) survive the API server and mean what
// they say.
func TestHintsAbsentVersusEmpty(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	defaults := newRole(ns, "defaults", "lists", "decode", "kvcr")
	none := newRole(ns, "none", "lists", "prefill", "dynamo-default-cost-fn")
	none.Spec.Hints = []v1alpha1.HintItem{}
	testenv.Create(t, k8s, defaults, none)

	testenv.WaitCondition(t, k8s, timeout, defaults, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
	testenv.WaitCondition(t, k8s, timeout, none, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
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
