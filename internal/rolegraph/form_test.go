package rolegraph

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestReleasedFormKeepsLastGood: in the released form a change that gives
// one role a hint policy of its own is refused on every role on the KV
// path that runs its current spec, and the router's config stays the one
// written before, read back in its form; a router whose form changes to
// one its last good entries cannot be written in is held.
func TestReleasedFormKeepsLastGood(t *testing.T) {
	cat := builtin.NewCatalog()
	role := func(name, r string, gen int64, ttl string) v1alpha1.RouterRole {
		return v1alpha1.RouterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: gen},
			Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: r, WorkerSelection: v1alpha1.WorkerSelection{Type: "dynamo-round-robin"},
				Hints: []v1alpha1.HintItem{{Type: "kv-retain", Parameters: &apiextensionsv1.JSON{Raw: []byte(`{"ttl_seconds":` + ttl + `}`)}}}},
		}
	}
	released := map[string]hintsconfig.Form{"llama": hintsconfig.FormRouterWideHint}
	in := Input{RouterRoles: []v1alpha1.RouterRole{role("decode", "decode", 1, "60"), role("prefill", "prefill", 1, "60")}, PolicyFileForms: released}
	first := Compile(cat, in).Router("llama")
	if first == nil || first.Held != "" || !strings.Contains(string(first.Config), "kv_hint_policy:") {
		t.Fatalf("first config is not in the released form: %+v\n%s", first, first.Config)
	}
	if first.ConfigMap.Data[compiled.FormKey] != string(hintsconfig.FormRouterWideHint) {
		t.Errorf("the ConfigMap does not name its form: %v", first.ConfigMap.Data)
	}

	in.ConfigMaps = []corev1.ConfigMap{*first.ConfigMap}
	in.RouterRoles[1] = role("prefill", "prefill", 2, "61")
	out := Compile(cat, in)
	second := out.Router("llama")
	if second.Hash != first.Hash || second.Held != "" {
		t.Errorf("config changed (hash %s, was %s; held %q):\n%s", second.Hash, first.Hash, second.Held, second.Config)
	}
	for _, name := range []string{"decode", "prefill"} {
		fs := out.RouterRole(name).Findings.Errors()
		if len(fs) != 1 || fs[0].Reason != v1alpha1.ReasonPolicyFormCannotCarry {
			t.Errorf("RouterRole %s: findings %v; want one PolicyFormCannotCarry", name, fs)
		}
	}

	// The form changes under roles whose last good entries differ: the
	// per-role ConfigMap cannot be written in the released form.
	perRole := Input{RouterRoles: []v1alpha1.RouterRole{role("decode", "decode", 1, "60"), role("prefill", "prefill", 1, "61")}}
	old := Compile(cat, perRole).Router("llama")
	perRole.ConfigMaps = []corev1.ConfigMap{*old.ConfigMap}
	perRole.PolicyFileForms = released
	held := Compile(cat, perRole).Router("llama")
	if !strings.Contains(held.Held, "RouterWideHint") {
		t.Errorf("router not held: %q", held.Held)
	}
}
