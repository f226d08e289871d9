package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestPolicyRefResolution follows a RouterRole through the life of the
// HintPolicy it references: missing, created, changed, made invalid,
// fixed and deleted. Each change recompiles the role without touching it.
func TestPolicyRefResolution(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "chat-decode", "chat", "decode", "dynamo-default-cost-fn")
	rr.Spec.Hints = []v1alpha1.HintItem{ref("session-retain"), inline("kv-evict", nil)}
	create(t, rr)

	// Missing: nothing can be checked, nothing runs.
	waitCondition(t, rr, v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonHintPolicyNotFound)
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonUnresolvedRefs)
	waitCondition(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonNotAccepted)
	waitConfigMap(t, ns, "chat", withoutRole("decode"))

	// Created: the role resolves and compiles with the policy's parameters.
	hp := newPolicy(ns, "session-retain", "kv-retain", map[string]any{"ttl_seconds": 600})
	create(t, hp)
	waitCondition(t, rr, v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolvedRefs)
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	waitConfigMap(t, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 600) }))
	waitUsedBy(t, hp, "chat-decode")

	// Changed: the compiled config follows.
	update(t, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = jsonParams(map[string]any{"ttl_seconds": 1800}) })
	waitConfigMap(t, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 1800) }))
	waitCondition(t, hp, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)

	// Made invalid: both objects say so, and the router keeps what ran.
	update(t, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = jsonParams(map[string]any{"ttl_seconds": 0}) })
	waitCondition(t, hp, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidParameters)
	waitCondition(t, rr, v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonHintPolicyInvalid)
	c := waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidParameters)
	if !strings.Contains(c.Message, "HintPolicy session-retain") || !strings.Contains(c.Message, "keeps running generation 1") {
		t.Errorf("Accepted message %q; want it to name the HintPolicy and the generation that keeps running", c.Message)
	}
	waitConfigMap(t, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 1800) }))

	// Fixed.
	update(t, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = jsonParams(map[string]any{"ttl_seconds": 900}) })
	waitCondition(t, rr, v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolvedRefs)
	waitConfigMap(t, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 900) }))

	// Deleted: the reference no longer resolves; the last good entry stays.
	if err := k8s.Delete(context.Background(), hp); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, rr, v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonHintPolicyNotFound)
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonUnresolvedRefs)
	waitConfigMap(t, ns, "chat", withConfig(func(cfg *hintsconfig.Config) error { return retainTTL(cfg, 900) }))

	// The role stops referencing it: usedBy of another policy follows.
	other := newPolicy(ns, "evict", "kv-evict", nil)
	create(t, other)
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = []v1alpha1.HintItem{ref("evict")} })
	waitUsedBy(t, other, "chat-decode")
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = []v1alpha1.HintItem{inline("kv-evict", nil)} })
	waitUsedBy(t, other)
}

func waitUsedBy(t *testing.T, hp *v1alpha1.HintPolicy, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("HintPolicy %s used by %v", hp.Name, want), func(ctx context.Context) error {
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
