package rolegraph

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestRouterTargetPicksTheForm: a router with a restart-mode workload
// targets a Dynamo Frontend and is written in the released form unless a
// declared catalog says its build reads the per-role form; a sidecar
// router is written in the per-role form. Off the KV path a role is
// written as default in the released form, never as a selected instance.
func TestRouterTargetPicksTheForm(t *testing.T) {
	cat := builtin.NewCatalog()
	role := func(name, mode, selection string, ttl string) v1alpha1.RouterRole {
		rr := v1alpha1.RouterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1},
			Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: name, RouterMode: v1alpha1.RouterMode(mode),
				WorkerSelection: v1alpha1.WorkerSelection{Type: selection}},
		}
		if ttl != "" {
			rr.Spec.Hints = []v1alpha1.HintItem{{Type: "kv-retain", Parameters: &apiextensionsv1.JSON{Raw: []byte(`{"ttl_seconds":` + ttl + `}`)}}}
		}
		return rr
	}
	kvFrontend := routerDeployment(corev1.Container{Args: []string{"--router-mode", "kv"}})
	for _, tc := range []struct {
		name     string
		roles    []v1alpha1.RouterRole
		deps     []appsv1.Deployment
		declared hintsconfig.Form
		// linked says the router's declared catalog links kvhint's
		// types into its Dynamo build; without it a restart-mode router
		// runs a stock build.
		linked bool
		// want is the policy file written; empty when none is.
		want string
		// refused are the RouterRoles refused with PolicyFormCannotCarry.
		refused []string
		// unlinked are the RouterRoles refused for a hint type a stock
		// Dynamo build does not link (UnknownHintType).
		unlinked []string
	}{{
		name:  "sidecar router: per-role form",
		roles: []v1alpha1.RouterRole{role("decode", "", "dynamo-default-cost-fn", "60")},
		want: `worker_selection:
  decode:
    hints:
    - parameters:
        min_prompt_tokens: 0
        priority: 50
        ttl_seconds: 60
      type: kv-retain
    type: dynamo-default-cost-fn
`,
	}, {
		name:   "restart-mode router: released form",
		roles:  []v1alpha1.RouterRole{role("decode", "", "dynamo-two-tier-cost-fn", "60"), role("prefill", "", "dynamo-default-cost-fn", "60")},
		deps:   []appsv1.Deployment{*kvFrontend},
		linked: true,
		want: `kv_hint_policy:
  parameters:
    min_prompt_tokens: 0
    priority: 50
    ttl_seconds: 60
  type: kv-retain
worker_selection:
  decode: decode
  instances:
  - name: decode
    type: dynamo-two-tier-cost-fn
  prefill: default
`,
	}, {
		name:     "restart-mode router whose declared build reads per-role hints",
		roles:    []v1alpha1.RouterRole{role("decode", "", "dynamo-default-cost-fn", "60")},
		deps:     []appsv1.Deployment{*kvFrontend},
		declared: hintsconfig.FormPerRoleHints,
		want: `worker_selection:
  decode:
    hints:
    - parameters:
        min_prompt_tokens: 0
        priority: 50
        ttl_seconds: 60
      type: kv-retain
    type: dynamo-default-cost-fn
`,
	}, {
		name:  "restart-mode router off the KV path: default under its mode",
		roles: []v1alpha1.RouterRole{role("aggregated", "round-robin", "dynamo-round-robin", "")},
		deps:  []appsv1.Deployment{*routerDeployment(corev1.Container{Args: []string{"--router-mode", "round-robin"}})},
		want: `worker_selection:
  aggregated: default
`,
	}, {
		name:    "restart-mode router whose roles run different hint policies: nothing written",
		roles:   []v1alpha1.RouterRole{role("decode", "", "dynamo-default-cost-fn", "60"), role("prefill", "", "dynamo-default-cost-fn", "61")},
		deps:    []appsv1.Deployment{*kvFrontend},
		linked:  true,
		refused: []string{"decode", "prefill"},
	}, {
		name:  "restart-mode router on a stock Dynamo build: hints refused, not written",
		roles: []v1alpha1.RouterRole{role("decode", "", "dynamo-two-tier-cost-fn", "60"), role("prefill", "", "dynamo-two-tier-cost-fn", "")},
		deps:  []appsv1.Deployment{*kvFrontend},
		want: `worker_selection:
  instances:
  - name: prefill
    type: dynamo-two-tier-cost-fn
  prefill: prefill
`,
		unlinked: []string{"decode"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{RouterRoles: tc.roles, Deployments: tc.deps}
			if tc.declared != "" {
				in.PolicyFileForms = map[string]hintsconfig.Form{"llama": tc.declared}
			}
			if tc.linked || tc.declared != "" {
				in.DeclaredCatalogs = map[string]bool{"llama": true}
			}
			out := Compile(cat, in)
			r := out.Router("llama")
			if diff := cmp.Diff(tc.want, string(r.Config)); diff != "" {
				t.Errorf("policy file (-want +got):\n%s", diff)
			}
			var refused, unlinked []string
			for _, res := range out.RouterRoles {
				for _, f := range res.Findings.Errors() {
					if f.Reason == v1alpha1.ReasonUnknownHintType {
						unlinked = append(unlinked, res.Name)
						if !strings.Contains(f.Message, `"kv-retain" is not linked into a stock Dynamo build`) {
							t.Errorf("%s: the message does not say the build does not link the type: %s", res.Name, f.Message)
						}
					}
					if f.Reason == v1alpha1.ReasonPolicyFormCannotCarry {
						refused = append(refused, res.Name)
						if !strings.Contains(f.Message, "role decode runs [kv-retain") || !strings.Contains(f.Message, "role prefill runs [kv-retain") {
							t.Errorf("%s: the message does not name the roles and hints that do not fit: %s", res.Name, f.Message)
						}
					}
				}
			}
			if diff := cmp.Diff(tc.refused, refused); diff != "" {
				t.Errorf("refused with PolicyFormCannotCarry (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.unlinked, unlinked); diff != "" {
				t.Errorf("refused with UnknownHintType (-want +got):\n%s", diff)
			}
			if len(tc.deps) > 0 && !tc.linked && tc.declared == "" && r.Config != nil {
				// Dynamo's own checks, as kvhint validate --target dynamo
				// runs them against a stock build.
				if _, probs := hintsconfig.CompileFor(cat, r.Config, hintsconfig.TargetDynamo, hintsconfig.Modes{}); probs.HasErrors() {
					t.Errorf("a stock Frontend refuses the file: %v\n%s", probs, r.Config)
				}
			}
			if len(tc.deps) > 0 && tc.declared == "" && r.Config != nil {
				// What a restart-mode router is given, a released
				// Frontend reads (the independent model of its parser).
				if err := dynamopolicy.CheckReleased(r.Config); err != nil {
					t.Errorf("a released Frontend refuses the file: %v\n%s", err, r.Config)
				}
			}
		})
	}
}
