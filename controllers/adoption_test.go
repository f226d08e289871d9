package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
)

// TestForeignConfigMapNeverAdopted is the attack of issue item 6: a
// ConfigMap that happens to be named "<router>-hints", created by someone
// else with keys of its own, must not be taken over (labels, owners,
// hints.yaml written over it) nor deleted when the router's last role goes.
// The role says why its config cannot be written instead.
func TestForeignConfigMapNeverAdopted(t *testing.T) {
	ns := newNamespace(t)
	foreign := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.HintsConfigMapName("squat"),
			Labels: map[string]string{"team": "billing"}},
		Data: map[string]string{"hints.yaml": "not ours\n", "billing.conf": "rate=1\n"},
	}
	create(t, foreign)
	wantData := maps.Clone(foreign.Data)

	rr := newRole(ns, "decode", "squat", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	c := waitCondition(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonConfigMapConflict)
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConfigMapConflict)
	t.Logf("Programmed: %s", c.Message)
	untouched := func(ctx context.Context) error {
		cm := get(t, ns, foreign.Name, &corev1.ConfigMap{})
		if !maps.Equal(cm.Data, wantData) {
			return fmt.Errorf("data %v; want %v", cm.Data, wantData)
		}
		if len(cm.OwnerReferences) != 0 || len(cm.Labels) != 1 || len(cm.Annotations) != 0 {
			return fmt.Errorf("metadata changed: labels %v annotations %v owners %v", cm.Labels, cm.Annotations, cm.OwnerReferences)
		}
		for _, mf := range cm.ManagedFields {
			if mf.Manager == controllers.FieldOwner {
				return fmt.Errorf("the manager wrote fields: %+v", mf)
			}
		}
		return nil
	}
	if err := untouched(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := appliesTo(ns, foreign.Name); n != 0 {
		t.Errorf("%d applies to a ConfigMap the manager did not create; want 0", n)
	}
	eventually(t, "a Warning event ConfigMapConflict", func(ctx context.Context) error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == rr.Name && e.Reason == string(v1alpha1.ReasonConfigMapConflict) && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})

	// The router's last role goes: the ConfigMap stays. A second role of
	// the router afterwards reports the conflict again, so the manager has
	// looked at the router since the first one was deleted.
	if err := k8s.Delete(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	again := newRole(ns, "prefill", "squat", "prefill", "dynamo-default-cost-fn")
	create(t, again)
	waitCondition(t, again, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonConfigMapConflict)
	if err := untouched(context.Background()); err != nil {
		t.Fatal(err)
	}
}
