package samples_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// TestSamplesBecomeReady applies config/samples and runs router pods that
// report the compiled hash, as sidecars would: every RouterRole becomes
// Ready and every HintPolicy Accepted.
func TestSamplesBecomeReady(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	files, err := filepath.Glob("../../config/samples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var roles, policies []string
	routers := map[string]bool{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		objs := testenv.MustCreateFile(t, k8s, ns, f)
		for _, o := range objs {
			switch o.GetKind() {
			case "RouterRole":
				roles = append(roles, o.GetName())
				router, _, _ := unstructured.NestedString(o.Object, "spec", "router")
				routers[router] = true
			case "HintPolicy":
				policies = append(policies, o.GetName())
			}
		}
	}
	if len(roles) < 4 || len(policies) < 2 {
		t.Fatalf("samples hold %d RouterRoles and %d HintPolicies; want the three scenarios", len(roles), len(policies))
	}

	// Before any router pod runs, nothing is Ready: Programmed says so.
	for _, name := range roles {
		testenv.WaitCondition(t, k8s, timeout, &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, string(v1alpha1.ConditionReady),
			testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNoRouterPods)})
	}
	// The manager writes, byte for byte, what `kvhint compile` prints for
	// the same files: both run rolegraph.Compile.
	offline := rolegraph.Input{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := rolegraph.ReadManifests(data, &offline); err != nil {
			t.Fatal(err)
		}
	}
	compiled := rolegraph.Compile(builtin.NewCatalog(), offline)
	for router := range routers {
		want := compiled.Router(router)
		cm := testenv.WaitConfigMap(t, k8s, timeout, ns, router, func(cm *corev1.ConfigMap) error {
			if got := cm.Data[v1alpha1.HintsConfigKey]; got != string(want.Config) {
				return fmt.Errorf("hints.yaml:\n%s\nwant, as compiled offline:\n%s", got, want.Config)
			}
			if got, want := cm.Data[v1alpha1.RolesKey], want.ConfigMap.Data[v1alpha1.RolesKey]; got != want {
				return fmt.Errorf("roles.yaml:\n%s\nwant, as compiled offline:\n%s", got, want)
			}
			if got := cm.Annotations[v1alpha1.HashAnnotation]; got != want.Hash {
				return fmt.Errorf("hash %q, want %q as compiled offline", got, want.Hash)
			}
			return nil
		})
		for i := range 2 {
			testenv.CreateRouterPod(t, k8s, ns, router, fmt.Sprintf("%s-router-%d", router, i), cm.Annotations[v1alpha1.HashAnnotation])
		}
	}
	for _, name := range roles {
		testenv.WaitCondition(t, k8s, timeout, &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, string(v1alpha1.ConditionReady),
			testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReady), MessageContains: "2/2 router pods run"})
	}
	for _, name := range policies {
		hp := &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		testenv.WaitCondition(t, k8s, timeout, hp, string(v1alpha1.ConditionAccepted), testenv.Want{Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonAccepted)})
		testenv.Eventually(t, timeout, "HintPolicy "+name+" used by chat-decode", func(ctx context.Context) error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(hp), hp); err != nil {
				return err
			}
			if !slices.Equal(hp.Status.UsedBy, []string{"chat-decode"}) {
				return fmt.Errorf("usedBy %v", hp.Status.UsedBy)
			}
			return nil
		})
	}
}
