package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestLastGoodKept makes a running role invalid: the router keeps its last
// accepted entry, the ConfigMap is not written, Programmed stays True for
// the generation that runs, and Accepted and Ready say why the new one does
// not. One Warning event marks the transition, not one per reconcile.
func TestLastGoodKept(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "decode", "llama", "decode", "dynamo-default-cost-fn")
	rr.Spec.Hints = []v1alpha1.HintItem{inline("kv-retain", map[string]any{"ttl_seconds": 600})}
	create(t, rr)
	cm := waitConfigMap(t, ns, "llama", anyConfigMap)
	hash := cm.Annotations[v1alpha1.HashAnnotation]
	pod := routerPod(t, ns, "llama", "llama-router-0", hash)
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{inline("kv-retain", map[string]any{"ttl_seconds": 0})}
	})
	accepted := waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidParameters)
	if want := `spec.hints[0] (kv-retain): parameter "ttl_seconds": 0 is out of range 1..86400. The router keeps running generation 1`; accepted.Message != want {
		t.Errorf("Accepted message:\n  %s\nwant:\n  %s", accepted.Message, want)
	}
	programmed := waitCondition(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed)
	if programmed.ObservedGeneration != 1 || !strings.Contains(programmed.Message, "generation 1, the last accepted; generation 2 is not accepted") {
		t.Errorf("Programmed is for generation %d: %q; want generation 1, saying that generation 2 is not accepted", programmed.ObservedGeneration, programmed.Message)
	}
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidParameters)
	if got := rr.Status.EffectiveHints; len(got) != 1 || !strings.Contains(string(got[0].Parameters.Raw), `"ttl_seconds":600`) {
		t.Errorf("effectiveHints %+v; want the kv-retain of generation 1, ttl_seconds 600", got)
	}
	after := get(t, ns, cm.Name, cm.DeepCopy())
	if after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the ConfigMap was written (resourceVersion %s -> %s) though its content did not change", cm.ResourceVersion, after.ResourceVersion)
	}

	// Another pod report recomputes the status without a transition of
	// Accepted: still a single event.
	routerPod(t, ns, "llama", "llama-router-1", hash)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods")
	eventually(t, "one InvalidParameters event", func(ctx context.Context) error {
		n, err := countEvents(ctx, ns, rr.Name, string(v1alpha1.ReasonInvalidParameters))
		if err == nil && n != 1 {
			err = fmt.Errorf("%d events", n)
		}
		return err
	})

	// Fixed: the new generation runs once the pods report its hash.
	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{inline("kv-retain", map[string]any{"ttl_seconds": 1200})}
	})
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	cm = waitConfigMap(t, ns, "llama", func(cm *corev1.ConfigMap) error {
		if cm.Annotations[v1alpha1.HashAnnotation] == hash {
			return fmt.Errorf("hash still %s", hash)
		}
		return nil
	})
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/2 router pods")
	reportHash(t, pod, cm.Annotations[v1alpha1.HashAnnotation])
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "1/2 router pods")
}

// TestLastGoodSurvivesRestart stops the manager, makes a running role
// invalid while no manager runs, and starts a new one: with no memory of
// the old spec, it finds the last accepted entry in the ConfigMap.
func TestLastGoodSurvivesRestart(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "prefill", "llama", "prefill", "kvcr")
	create(t, rr)
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	before := waitConfigMap(t, ns, "llama", withConfig(func(cfg *hintsconfig.Config) error {
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

	c := waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonUnknownWorkerSelection)
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
