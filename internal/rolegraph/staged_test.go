package rolegraph

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// TestStagedRouterCountsUnchangedRolesOnStable: while a rollout stages a
// router's new config, its pods run the stable one. A role whose entry is
// the same in both runs as specified and is Programmed on the stable
// config's pods; the role whose change made the candidate is counted
// against the candidate, which no pod runs yet. Without a rollout both
// are counted against the config compiled now, as before.
func TestStagedRouterCountsUnchangedRolesOnStable(t *testing.T) {
	cat := builtin.NewCatalog()
	role := func(name, r string, gen int64, minBlocks string) v1alpha1.RouterRole {
		rr := v1alpha1.RouterRole{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: gen},
			Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: r, RouterMode: "kv",
				WorkerSelection: v1alpha1.WorkerSelection{Type: "kvcr",
					Parameters: &apiextensionsv1.JSON{Raw: []byte(`{"shared_cache_multiplier":0.5}`)}}},
		}
		rr.Spec.Hints = []v1alpha1.HintItem{{Type: "kv-fetch", Parameters: &apiextensionsv1.JSON{Raw: []byte(`{"min_blocks":` + minBlocks + `}`)}}}
		return rr
	}
	stableIn := Input{Now: now, RouterRoles: []v1alpha1.RouterRole{role("llama-decode", "decode", 1, "4"), role("llama-prefill", "prefill", 1, "4")}}
	stable := Compile(cat, stableIn).Router("llama")
	cm := *stable.ConfigMap
	var pods []corev1.Pod
	for _, name := range []string{"llama-router-0", "llama-router-1"} {
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels:      map[string]string{v1alpha1.RouterLabel: "llama"},
			Annotations: map[string]string{v1alpha1.AppliedHashAnnotation: stable.Hash}}})
	}
	changed := Input{Now: now, ConfigMaps: []corev1.ConfigMap{cm}, Pods: pods,
		RouterRoles: []v1alpha1.RouterRole{role("llama-decode", "decode", 1, "4"), role("llama-prefill", "prefill", 2, "2")}}

	for _, tc := range []struct {
		name                       string
		staged                     bool
		decodeHash, prefillHash    string
		decodeReady, prefillReady  metav1.ConditionStatus
		decodeSummary, prefillPods string
	}{
		{name: "staged", staged: true, decodeReady: metav1.ConditionTrue, prefillReady: metav1.ConditionFalse, decodeSummary: "2/2", prefillPods: "0/2"},
		{name: "not staged", staged: false, decodeReady: metav1.ConditionFalse, prefillReady: metav1.ConditionFalse, decodeSummary: "0/2", prefillPods: "0/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := changed
			if tc.staged {
				in.Staged = map[string]bool{"llama": true}
			}
			out := Compile(cat, in)
			cand := out.Router("llama").Hash
			if cand == stable.Hash {
				t.Fatalf("the changed role compiles to the stable hash %s", cand)
			}
			decode, prefill := out.RouterRole("llama-decode"), out.RouterRole("llama-prefill")
			wantDecodeHash := cand
			if tc.staged {
				wantDecodeHash = stable.Hash
			}
			if got := decode.Status.RouterPods; got == nil || got.Hash != wantDecodeHash || got.Summary != tc.decodeSummary {
				t.Errorf("llama-decode routerPods = %+v, want %s on %s", got, tc.decodeSummary, wantDecodeHash)
			}
			if got := prefill.Status.RouterPods; got == nil || got.Hash != cand || got.Summary != tc.prefillPods {
				t.Errorf("llama-prefill routerPods = %+v, want %s on the candidate %s", got, tc.prefillPods, cand)
			}
			if c := meta.FindStatusCondition(decode.Status.Conditions, string(v1alpha1.ConditionReady)); c == nil || c.Status != tc.decodeReady {
				t.Errorf("llama-decode Ready = %+v, want %s", c, tc.decodeReady)
			}
			if c := meta.FindStatusCondition(prefill.Status.Conditions, string(v1alpha1.ConditionReady)); c == nil || c.Status != tc.prefillReady {
				t.Errorf("llama-prefill Ready = %+v, want %s", c, tc.prefillReady)
			}
		})
	}
}
