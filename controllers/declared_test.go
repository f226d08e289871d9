package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
)

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
	ns := newNamespace(t)
	create(t, catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", readFile(t, customRouterCatalog)))

	decode := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	decode.Spec.WorkerSelection.Parameters = jsonParams(map[string]any{"shared_cache_multiplier": 0.25})
	decode.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": 128})}
	prefill := newRole(ns, "prefill", "dynamo", "prefill", "kv-share")
	prefill.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_block": 64})}
	aggregated := newRole(ns, "aggregated", "dynamo", "aggregated", "kv-share")
	aggregated.Spec.WorkerSelection.Parameters = jsonParams(map[string]any{"shared_cache_multiplier": 1.5})
	encode := newRole(ns, "encode", "dynamo", "encode", "kv-share")
	encode.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", nil), inline("peer-pull", nil)}
	linked := newRole(ns, "linked", "sidecar-router", "decode", "kv-share")
	create(t, decode, prefill, aggregated, encode, linked)

	waitCondition(t, decode, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	cm := waitConfigMap(t, ns, "dynamo", func(cm *corev1.ConfigMap) error {
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
		c := waitCondition(t, tc.rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, tc.reason)
		if !strings.HasPrefix(c.Message, tc.msg) {
			t.Errorf("RouterRole %s Accepted:\n  %s\nwant it to start with:\n  %s", tc.rr.Name, c.Message, tc.msg)
		}
	}

	// A wrong type on the accepted role: refused, and the router keeps the
	// last good entry, checked again by the declared catalog.
	update(t, decode, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": "lots"})}
	})
	c := waitCondition(t, decode, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidParameters)
	if want := `spec.hints[0] (harness_prefetch): parameter "max_blocks": "lots" is not an integer. The router keeps running generation 1`; c.Message != want {
		t.Errorf("Accepted:\n  %s\nwant:\n  %s", c.Message, want)
	}
}

// TestDeclaredCatalogLastGood: a declaration that cannot be used, or two
// of them, refuse every role of the router with a reason of their own,
// and the router's ConfigMap is not written: the router keeps its last
// good config, and Programmed still counts the pods that run it.
func TestDeclaredCatalogLastGood(t *testing.T) {
	ns := newNamespace(t)
	good := readFile(t, customRouterCatalog)
	decl := catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", good)
	create(t, decl)
	rr := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	prefill := newRole(ns, "prefill", "dynamo", "prefill", "dynamo-default-cost-fn")
	create(t, rr, prefill)
	waitCondition(t, prefill, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	cm := waitConfigMap(t, ns, "dynamo", func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "prefill:") || !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "decode:") {
			return fmt.Errorf("hints.yaml does not hold both roles yet:\n%s", cm.Data[v1alpha1.HintsConfigKey])
		}
		return nil
	})
	pod0 := routerPod(t, ns, "dynamo", "dynamo-0", cm.Annotations[v1alpha1.HashAnnotation])
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	update(t, decl, func(cm *corev1.ConfigMap) {
		cm.Data[v1alpha1.CatalogKey] = strings.Replace(good, "commitsKVCopies: params.shared_cache_multiplier > 0", "commitsKVCopies: params.shared > 0", 1)
	})
	c := waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidCatalog)
	for _, want := range []string{"spec.router (ConfigMap dynamo-catalog): ConfigMap dynamo-catalog declares the catalog of router dynamo, but it cannot be used",
		"workerSelections[1].commitsKVCopies: does not compile", "The router keeps running generation 1"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Accepted message %q does not say %q", c.Message, want)
		}
	}
	waitCondition(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed)
	// A change that would rewrite the config (a role goes) waits for a
	// usable declaration too: nothing is written.
	eventually(t, "deleting RouterRole prefill", func(ctx context.Context) error { return k8s.Delete(ctx, prefill) })
	// A second pod is the barrier: the reconcile that counts it comes
	// after the one the delete caused.
	pod1 := routerPod(t, ns, "dynamo", "dynamo-1", cm.Annotations[v1alpha1.HashAnnotation])
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods")
	if after := get(t, ns, cm.Name, &corev1.ConfigMap{}); after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the ConfigMap was written (resourceVersion %s -> %s) while the declaration was broken:\n%s", cm.ResourceVersion, after.ResourceVersion, after.Data[v1alpha1.HintsConfigKey])
	}

	// Fixed: what waited is written (prefill is gone), then declared twice.
	update(t, decl, func(cm *corev1.ConfigMap) { cm.Data[v1alpha1.CatalogKey] = good })
	cm = waitConfigMap(t, ns, "dynamo", func(cm *corev1.ConfigMap) error {
		if strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "prefill:") {
			return fmt.Errorf("hints.yaml still holds prefill")
		}
		return nil
	})
	reportHash(t, pod0, cm.Annotations[v1alpha1.HashAnnotation])
	reportHash(t, pod1, cm.Annotations[v1alpha1.HashAnnotation])
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	create(t, catalogConfigMap(t, ns, "dynamo-catalog-2", "dynamo", good))
	c = waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonCatalogConflict)
	if want := "2 ConfigMaps declare the catalog of router dynamo (label hints.kvrouter.io/catalog-for=dynamo): dynamo-catalog, dynamo-catalog-2; keep one"; !strings.Contains(c.Message, want) {
		t.Errorf("Accepted message %q does not say %q", c.Message, want)
	}
	if after := get(t, ns, cm.Name, &corev1.ConfigMap{}); after.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the ConfigMap was written while two declarations conflicted")
	}
	eventually(t, "deleting the second declaration", func(ctx context.Context) error {
		return k8s.Delete(ctx, catalogConfigMap(t, ns, "dynamo-catalog-2", "dynamo", ""))
	})
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
}

// TestDeclaredHintPolicy: a HintPolicy whose type only a declared catalog
// of its namespace holds is checked against that declaration, and says
// which router's it is; with no declaration the type is unknown.
func TestDeclaredHintPolicy(t *testing.T) {
	ns := newNamespace(t)
	good := newPolicy(ns, "prefetch", "harness_prefetch", map[string]any{"max_blocks": 8})
	bad := newPolicy(ns, "prefetch-zero", "harness_prefetch", map[string]any{"max_blocks": 0})
	create(t, good, bad)
	waitCondition(t, good, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonUnknownHintType)

	create(t, catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", readFile(t, customRouterCatalog)))
	waitConditionMessage(t, good, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted,
		"hint policy type harness_prefetch accepts the parameters (declared by the catalog of router dynamo, not linked into the manager)")
	waitConditionMessage(t, bad, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidParameters,
		`checked against the declared catalog of router dynamo: spec.parameters (harness_prefetch): parameter "max_blocks": 0 is out of range 1..4096`)

	// The router's roles resolve references to them with its own catalog.
	rr := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	rr.Spec.Hints = []v1alpha1.HintItem{ref("prefetch")}
	create(t, rr)
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	waitCondition(t, rr, v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolvedRefs)
	cm := waitConfigMap(t, ns, "dynamo", anyConfigMap)
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
	ns := newNamespace(t)
	good := readFile(t, customRouterCatalog)
	decl := catalogConfigMap(t, ns, "dynamo-catalog", "dynamo", good)
	create(t, decl)
	rr := newRole(ns, "decode", "dynamo", "decode", "kv-share")
	rr.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": 32})}
	create(t, rr)
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	before := waitConfigMap(t, ns, "dynamo", anyConfigMap)
	routerPod(t, ns, "dynamo", "dynamo-0", before.Annotations[v1alpha1.HashAnnotation])
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	stopManager()
	update(t, decl, func(cm *corev1.ConfigMap) {
		cm.Data[v1alpha1.CatalogKey] = "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\n"
	})
	var err error
	if stopManager, err = startManager(); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidCatalog)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonNotAccepted,
		"ConfigMap dynamo-hints is left as it is, so router pods run what it holds")
	after := get(t, ns, before.Name, &corev1.ConfigMap{})
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the ConfigMap was written across the restart:\n%s\nbecame\n%s", before.Data[v1alpha1.HintsConfigKey], after.Data[v1alpha1.HintsConfigKey])
	}

	update(t, decl, func(cm *corev1.ConfigMap) { cm.Data[v1alpha1.CatalogKey] = good })
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
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
	ns := newNamespace(t)
	ctx := context.Background()
	baseN, baseBytes := catalogUse(t)
	cm := catalogConfigMap(t, ns, "edited-catalog", "edited", slowCatalog(t, 0))
	rr := newRole(ns, "decode", "edited", "decode", "kv-share")
	rr.Spec.Hints = []v1alpha1.HintItem{inline("harness_prefetch", map[string]any{"max_blocks": 8})}
	create(t, cm, rr)
	const versions = 12
	var most float64
	for v := 1; v <= versions; v++ {
		n, _ := catalogUse(t)
		most = max(most, n-baseN)
		eventually(t, fmt.Sprintf("version %d of the declaration written", v), func(ctx context.Context) error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
				return err
			}
			cm.Data[v1alpha1.CatalogKey] = slowCatalog(t, v)
			return k8s.Update(ctx, cm)
		})
	}
	waitCondition(t, rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	eventually(t, "one declaration kept for the last version", func(context.Context) error {
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
	eventually(t, "the store back to what it held before", func(context.Context) error {
		if n, bytes := catalogUse(t); n != baseN || bytes != baseBytes {
			return fmt.Errorf("%g declarations (%g bytes) kept after the ConfigMap was deleted; want %g (%g bytes), as before", n, bytes, baseN, baseBytes)
		}
		return nil
	})
}
