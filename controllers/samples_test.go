package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	files, err := filepath.Glob("../config/samples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var roles, policies []string
	routers := map[string]bool{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		objs, err := testenv.CreateFile(t, k8s, ns, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
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
			if err := k8s.Get(ctx, keyOf(hp), hp); err != nil {
				return err
			}
			if !slices.Equal(hp.Status.UsedBy, []string{"chat-decode"}) {
				return fmt.Errorf("usedBy %v", hp.Status.UsedBy)
			}
			return nil
		})
	}
}

// invalidSample is what one file of config/samples/invalid must produce.
type invalidSample struct {
	file string
	// object, condition and reason: the RouterRole (or HintPolicy, when
	// policy is set) and the condition it gets.
	object    string
	policy    bool
	condition v1alpha1.ConditionType
	reason    v1alpha1.ConditionReason
	// also are further conditions on the same object.
	also map[v1alpha1.ConditionType]v1alpha1.ConditionReason
	// rejected, when set, is the API server's refusal instead.
	rejected string
}

var invalidSamples = []invalidSample{
	{file: "unknown-worker-selection.yaml", object: "unknown-worker-selection", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonUnknownWorkerSelection},
	{file: "invalid-parameters.yaml", object: "invalid-parameters", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonInvalidParameters},
	{file: "unknown-hint-type.yaml", object: "unknown-hint-type", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonUnknownHintType},
	{file: "duplicate-hint-name.yaml", object: "duplicate-hint-name", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonDuplicateHintName},
	{file: "kvcopy-sender-missing.yaml", object: "kvcopy-sender-missing", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonKVCopySenderMissing},
	{file: "kvcopy-sender-duplicate.yaml", object: "kvcopy-sender-duplicate", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonKVCopySenderDuplicate},
	{file: "role-conflict.yaml", object: "conflict-second", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonRoleConflict,
		also: map[v1alpha1.ConditionType]v1alpha1.ConditionReason{v1alpha1.ConditionProgrammed: v1alpha1.ReasonNotAccepted}},
	{file: "hintpolicy-not-found.yaml", object: "hintpolicy-not-found", condition: v1alpha1.ConditionResolvedRefs, reason: v1alpha1.ReasonHintPolicyNotFound,
		also: map[v1alpha1.ConditionType]v1alpha1.ConditionReason{v1alpha1.ConditionAccepted: v1alpha1.ReasonUnresolvedRefs}},
	{file: "hintpolicy-invalid.yaml", object: "hintpolicy-invalid", condition: v1alpha1.ConditionResolvedRefs, reason: v1alpha1.ReasonHintPolicyInvalid,
		also: map[v1alpha1.ConditionType]v1alpha1.ConditionReason{v1alpha1.ConditionAccepted: v1alpha1.ReasonInvalidParameters}},
	{file: "hintpolicy-invalid.yaml", object: "retain-typo", policy: true, condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonInvalidParameters},
	{file: "invalid-worker-selector.yaml", object: "invalid-worker-selector", condition: v1alpha1.ConditionAccepted, reason: v1alpha1.ReasonInvalidWorkerSelector},

	{file: "hints-require-kv-mode.yaml", rejected: "hints run only on the KV path"},
	{file: "invalid-router-mode.yaml", rejected: `spec.routerMode: Unsupported value: "fastest"`},
	{file: "invalid-role.yaml", rejected: `spec.role: Unsupported value: "Decode_Stage": supported values: "aggregated", "prefill", "decode", "encode"`},
	{file: "invalid-hint-name.yaml", rejected: `spec.hints[0].name: Invalid value: "Retain_Long"`},
	{file: "duplicate-names.yaml", rejected: "hint names must be unique within a role"},
	{file: "type-and-policyref.yaml", rejected: "set exactly one of type (an inline hint policy) or policyRef"},
	{file: "too-many-hints.yaml", rejected: "must have at most 32 items"},
}

// TestInvalidSamples applies each file of config/samples/invalid in a
// namespace of its own and checks the reason it gets: a condition for the
// catalog and graph rules, the API server's refusal for the rules the CRD
// enforces.
func TestInvalidSamples(t *testing.T) {
	testenv.Get(t)
	entries, err := os.ReadDir("../config/samples/invalid")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.ContainsFunc(invalidSamples, func(s invalidSample) bool { return s.file == e.Name() }) {
			t.Errorf("config/samples/invalid/%s has no expectation in invalidSamples", e.Name())
		}
	}
	applied := map[string]string{} // file -> namespace
	for _, s := range invalidSamples {
		t.Run(strings.TrimSuffix(s.file, ".yaml")+"/"+s.object, func(t *testing.T) {
			ns, ok := applied[s.file]
			if !ok {
				ns = testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
				applied[s.file] = ns
				_, err := testenv.CreateFile(t, k8s, ns, filepath.Join("../config/samples/invalid", s.file))
				switch {
				case s.rejected != "" && err == nil:
					t.Fatalf("the API server accepted it; want %q", s.rejected)
				case s.rejected != "" && !apierrors.IsInvalid(err):
					t.Fatalf("got %v; want an Invalid error", err)
				case s.rejected != "" && !strings.Contains(err.Error(), s.rejected):
					t.Fatalf("server said:\n  %v\nwant it to contain:\n  %s", err, s.rejected)
				case s.rejected == "" && err != nil:
					t.Fatalf("refused: %v", err)
				}
			}
			if s.rejected != "" {
				return
			}
			var obj client.Object = &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.object}}
			if s.policy {
				obj = &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.object}}
			}
			waitFalse := func(typ v1alpha1.ConditionType, reason v1alpha1.ConditionReason) {
				t.Helper()
				want := testenv.Want{Status: metav1.ConditionFalse, Reason: string(reason)}
				if typ == v1alpha1.ConditionProgrammed {
					// Programmed reports the generation that runs.
					want.Generation = testenv.AnyGeneration
				}
				testenv.WaitCondition(t, k8s, timeout, obj, string(typ), want)
			}
			waitFalse(s.condition, s.reason)
			for typ, reason := range s.also {
				waitFalse(typ, reason)
			}
			if !s.policy {
				// Ready repeats the reason of the first condition that fails.
				first := s.reason
				if r, ok := s.also[v1alpha1.ConditionAccepted]; ok {
					first = r
				}
				testenv.WaitCondition(t, k8s, timeout, obj, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionFalse, Reason: string(first)})
			}
		})
	}
}
