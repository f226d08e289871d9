package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestConfigMapContentAndOwnership checks what the manager writes for a
// router with two roles: the compiled config the sidecar accepts, its hash,
// the labels the manager watches by, owner references to both roles (none
// of them a controller), and server-side apply under the manager's field
// owner.
func TestConfigMapContentAndOwnership(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	prefill := newRole(ns, "llama-prefill", "llama", "prefill", "kvcr")
	decode := newRole(ns, "llama-decode", "llama", "decode", "dynamo-default-cost-fn")
	decode.Spec.Hints = []v1alpha1.HintItem{}
	testenv.Create(t, k8s, prefill, decode)

	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "llama", func(cm *corev1.ConfigMap) error {
		if len(cm.OwnerReferences) != 2 {
			return fmt.Errorf("%d owners", len(cm.OwnerReferences))
		}
		return nil
	})
	dec, err := compiled.Decode(cm.Data)
	if err != nil {
		t.Fatalf("the sidecar could not read the config: %v\n%v", err, cm.Data)
	}
	cfg := dec.Parsed
	if _, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, dec.Modes()); probs.HasErrors() {
		t.Fatalf("the config breaks a rule: %v", probs)
	}
	if got, want := cm.Annotations[v1alpha1.HashAnnotation], compiled.Hash(cm.Data); got != want {
		t.Errorf("hash annotation %q; content hashes to %q", got, want)
	}
	if diff := cmp.Diff(hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"prefill": hintsconfig.ModeKV, "decode": hintsconfig.ModeKV}}, dec.Modes()); diff != "" {
		t.Errorf("roles.yaml modes (-want +got):\n%s", diff)
	}
	if got := cfg.WorkerSelection["prefill"]; got == nil || got.Hints == nil || len(*got.Hints) != 2 {
		t.Errorf("prefill entry %+v; want kvcr's two default hints expanded", got)
	}
	if got := cfg.WorkerSelection["decode"]; got == nil || got.Hints == nil || len(*got.Hints) != 0 {
		t.Errorf("decode entry %+v; want hints: []", got)
	}
	wantLabels := map[string]string{v1alpha1.RouterLabel: "llama", v1alpha1.ManagedByLabel: v1alpha1.ManagedBy}
	for k, v := range wantLabels {
		if cm.Labels[k] != v {
			t.Errorf("label %s=%q; want %q", k, cm.Labels[k], v)
		}
	}

	get(t, ns, prefill.Name, prefill)
	get(t, ns, decode.Name, decode)
	want := []metav1.OwnerReference{
		{APIVersion: "hints.kvrouter.io/v1alpha1", Kind: "RouterRole", Name: "llama-decode", UID: decode.UID},
		{APIVersion: "hints.kvrouter.io/v1alpha1", Kind: "RouterRole", Name: "llama-prefill", UID: prefill.UID},
	}
	if !slices.EqualFunc(cm.OwnerReferences, want, func(a, b metav1.OwnerReference) bool {
		return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
			a.Controller == nil && a.BlockOwnerDeletion == nil
	}) {
		t.Errorf("ownerReferences %+v; want %+v, no controller", cm.OwnerReferences, want)
	}

	var applied bool
	for _, mf := range cm.ManagedFields {
		if mf.Manager == controllers.FieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply {
			applied = true
		}
	}
	if !applied {
		t.Errorf("managedFields %+v; want an Apply entry by %s", cm.ManagedFields, controllers.FieldOwner)
	}
}

// TestConfigMapDriftRepaired edits the compiled config by hand; the manager
// puts it back, and leaves alone what others added.
func TestConfigMapDriftRepaired(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	testenv.Create(t, k8s, newRole(ns, "decode", "drift", "decode", "dynamo-default-cost-fn"))
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "drift", nil)
	want := cm.Data[v1alpha1.HintsConfigKey]

	wantRoles := cm.Data[v1alpha1.RolesKey]

	patch := []byte(`{"metadata":{"labels":{"team":"serving"}},"data":{"hints.yaml":"worker_selection:\n  decode: {type: dynamo-random}\n","roles.yaml":"decode:\n  routerMode: round-robin\n","notes.txt":"hand-written"}}`)
	if err := k8s.Patch(context.Background(), cm, rawMergePatch(patch)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitConfigMap(t, k8s, timeout, ns, "drift", func(cm *corev1.ConfigMap) error {
		if cm.Data[v1alpha1.HintsConfigKey] != want {
			return fmt.Errorf("hints.yaml is still\n%s", cm.Data[v1alpha1.HintsConfigKey])
		}
		if cm.Data[v1alpha1.RolesKey] != wantRoles {
			return fmt.Errorf("roles.yaml is still\n%s", cm.Data[v1alpha1.RolesKey])
		}
		if cm.Data["notes.txt"] != "hand-written" || cm.Labels["team"] != "serving" {
			return fmt.Errorf("fields the manager does not own were removed: %v %v", cm.Labels, cm.Data)
		}
		return nil
	})
}

// TestConfigMapRemovedWithLastRole deletes a router's roles one by one:
// owner references follow, and the ConfigMap goes with the last role.
// envtest runs no garbage collector, so what is tested is the manager's
// own delete; in a cluster the owner references give the same result even
// without the manager.
func TestConfigMapRemovedWithLastRole(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	a := newRole(ns, "a", "gone", "prefill", "dynamo-default-cost-fn")
	b := newRole(ns, "b", "gone", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, a, b)
	testenv.WaitConfigMap(t, k8s, timeout, ns, "gone", ownedBy("a", "b"))

	if err := k8s.Delete(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	testenv.WaitConfigMap(t, k8s, timeout, ns, "gone", func(cm *corev1.ConfigMap) error {
		if err := ownedBy("b")(cm); err != nil {
			return err
		}
		return withoutRole("prefill")(cm)
	})

	if err := k8s.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "ConfigMap gone-hints deleted", func(ctx context.Context) error {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gone-hints"}, &corev1.ConfigMap{})
		if isNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return err
	})
}

// TestNoWriteWhenUnchanged makes the manager recompile a router whose
// config does not change (router pods come and report a hash, which
// changes only status): it sends no apply for the ConfigMap.
func TestNoWriteWhenUnchanged(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "steady", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "steady", nil)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNoRouterPods), Generation: testenv.AnyGeneration})
	if n := appliesTo(ns, cm.Name); n != 1 {
		t.Fatalf("%d applies to create the ConfigMap; want 1", n)
	}

	pod := testenv.CreateRouterPod(t, k8s, ns, "steady", "steady-router-0", "")
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "0/1", Generation: testenv.AnyGeneration})
	testenv.ReportHash(t, k8s, pod, cm.Annotations[v1alpha1.HashAnnotation])
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonProgrammed), Generation: testenv.AnyGeneration})
	if n := appliesTo(ns, cm.Name); n != 1 {
		t.Errorf("%d applies after two recompiles that changed nothing; want still 1", n)
	}
}

func ownedBy(names ...string) func(*corev1.ConfigMap) error {
	return func(cm *corev1.ConfigMap) error {
		var got []string
		for _, o := range cm.OwnerReferences {
			got = append(got, o.Name)
		}
		if !slices.Equal(got, names) {
			return fmt.Errorf("owned by %v; want %v", got, names)
		}
		return nil
	}
}

// TestLabelsEditedAway removes the labels the manager watches ConfigMaps
// by, while a role runs its last good entry: the manager puts the labels
// back and the entry stays.
func TestLabelsEditedAway(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "decode", "unlabelled", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "unlabelled", nil)
	want := cm.Data[v1alpha1.HintsConfigKey]
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.WorkerSelection.Type = "kv-oracle" })
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonUnknownWorkerSelection)})

	patch := []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null,"hints.kvrouter.io/router":null}}}`)
	if err := k8s.Patch(context.Background(), cm, rawMergePatch(patch)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitConfigMap(t, k8s, timeout, ns, "unlabelled", func(cm *corev1.ConfigMap) error {
		if cm.Labels[v1alpha1.RouterLabel] != "unlabelled" || cm.Labels[v1alpha1.ManagedByLabel] != v1alpha1.ManagedBy {
			return fmt.Errorf("labels %v", cm.Labels)
		}
		if cm.Data[v1alpha1.HintsConfigKey] != want {
			return fmt.Errorf("the last good entry is gone:\n%s", cm.Data[v1alpha1.HintsConfigKey])
		}
		return nil
	})
}

// TestWorkerSelectorsCompiled: each role's workerSelector reaches the
// ConfigMap in roles.yaml, next to its router mode and an unchanged
// hints.yaml; a changed selector is rewritten, and goes away when the role
// drops it. The hash covers both keys.
func TestWorkerSelectorsCompiled(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	prefill := newRole(ns, "pools-prefill", "pools", "prefill", "kvcr")
	prefill.Spec.WorkerSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "prefill"}}
	decode := newRole(ns, "pools-decode", "pools", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, prefill, decode)

	const want = "decode:\n  routerMode: kv\nprefill:\n  routerMode: kv\n  workerSelector:\n    matchLabels:\n      app.kubernetes.io/component: prefill\n"
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "pools", func(cm *corev1.ConfigMap) error {
		if got := cm.Data[v1alpha1.RolesKey]; got != want {
			return fmt.Errorf("%s is %q, want %q", v1alpha1.RolesKey, got, want)
		}
		return nil
	})
	doc := cm.Data[v1alpha1.HintsConfigKey]
	hash := cm.Annotations[v1alpha1.HashAnnotation]
	if want := compiled.Hash(cm.Data); hash != want {
		t.Errorf("hash annotation %q; hints.yaml and roles.yaml hash to %q", hash, want)
	}
	if _, err := compiled.Decode(cm.Data); err != nil {
		t.Errorf("the sidecar could not read the config: %v", err)
	}

	updateRole(t, ns, prefill.Name, func(rr *v1alpha1.RouterRole) {
		rr.Spec.WorkerSelector.MatchLabels["app.kubernetes.io/component"] = "prefill-v2"
	})
	testenv.WaitConfigMap(t, k8s, timeout, ns, "pools", func(cm *corev1.ConfigMap) error {
		if got := cm.Data[v1alpha1.RolesKey]; got != "decode:\n  routerMode: kv\nprefill:\n  routerMode: kv\n  workerSelector:\n    matchLabels:\n      app.kubernetes.io/component: prefill-v2\n" {
			return fmt.Errorf("%s is %q", v1alpha1.RolesKey, got)
		}
		if got := cm.Data[v1alpha1.HintsConfigKey]; got != doc {
			return fmt.Errorf("hints.yaml changed with a selector:\n%s", got)
		}
		// Only the selector changed, and still the hash does.
		if got := cm.Annotations[v1alpha1.HashAnnotation]; got == hash || got != compiled.Hash(cm.Data) {
			return fmt.Errorf("hash annotation %q (was %q); the data hashes to %q", got, hash, compiled.Hash(cm.Data))
		}
		return nil
	})

	updateRole(t, ns, prefill.Name, func(rr *v1alpha1.RouterRole) { rr.Spec.WorkerSelector = nil })
	testenv.WaitConfigMap(t, k8s, timeout, ns, "pools", func(cm *corev1.ConfigMap) error {
		if got := cm.Data[v1alpha1.RolesKey]; got != "decode:\n  routerMode: kv\nprefill:\n  routerMode: kv\n" {
			return fmt.Errorf("%s is still %q", v1alpha1.RolesKey, got)
		}
		return nil
	})
}

// updateRole changes a RouterRole's spec, again on a conflict with the
// manager's status writes.
func updateRole(t *testing.T, ns, name string, change func(*v1alpha1.RouterRole)) {
	t.Helper()
	testenv.Eventually(t, timeout, "RouterRole "+name+" updated", func(ctx context.Context) error {
		rr := &v1alpha1.RouterRole{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, rr); err != nil {
			return err
		}
		change(rr)
		return k8s.Update(ctx, rr)
	})
}

// TestForeignConfigMapNeverAdopted is the attack of issue item 6: a
// ConfigMap that happens to be named "<router>-hints", created by someone
// else with keys of its own, must not be taken over (labels, owners,
// hints.yaml written over it) nor deleted when the router's last role goes.
// The role says why its config cannot be written instead.
func TestForeignConfigMapNeverAdopted(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	foreign := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.HintsConfigMapName("squat"),
			Labels: map[string]string{"team": "billing"}},
		Data: map[string]string{"hints.yaml": "not ours\n", "billing.conf": "rate=1\n"},
	}
	testenv.Create(t, k8s, foreign)
	wantData := maps.Clone(foreign.Data)

	rr := newRole(ns, "decode", "squat", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	c := testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonConfigMapConflict), Generation: testenv.AnyGeneration})
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonConfigMapConflict)})
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
	testenv.Eventually(t, timeout, "a Warning event ConfigMapConflict", func(ctx context.Context) error {
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
	testenv.Create(t, k8s, again)
	testenv.WaitCondition(t, k8s, timeout, again, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonConfigMapConflict), Generation: testenv.AnyGeneration})
	if err := untouched(context.Background()); err != nil {
		t.Fatal(err)
	}
}
