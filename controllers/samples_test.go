package controllers_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

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
