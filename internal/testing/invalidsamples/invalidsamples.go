// Package invalidsamples is what each file of config/samples/invalid must
// produce: the condition and reason the manager gives the object, or the
// API server's refusal. test/samples applies the files and waits for
// them; test/gitops reads the same objects as GitOps tools do. Only tests
// import it; it imports the API types.
package invalidsamples

import "github.com/kvrouter/kv-hint-operator/api/v1alpha1"

// Dir is config/samples/invalid, from the module root.
const Dir = "config/samples/invalid"

// Sample is what one file must produce.
type Sample struct {
	File string
	// Object, Condition and Reason: the RouterRole (or HintPolicy, when
	// Policy is set) and the condition it gets.
	Object    string
	Policy    bool
	Condition v1alpha1.ConditionType
	Reason    v1alpha1.ConditionReason
	// Also are further conditions on the same object.
	Also map[v1alpha1.ConditionType]v1alpha1.ConditionReason
	// Rejected, when set, is the API server's refusal instead.
	Rejected string
}

// All holds every file of Dir, some more than once (one per object).
var All = []Sample{
	{File: "unknown-worker-selection.yaml", Object: "unknown-worker-selection", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonUnknownWorkerSelection},
	{File: "invalid-parameters.yaml", Object: "invalid-parameters", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonInvalidParameters},
	{File: "unknown-hint-type.yaml", Object: "unknown-hint-type", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonUnknownHintType},
	{File: "duplicate-hint-name.yaml", Object: "duplicate-hint-name", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonDuplicateHintName},
	{File: "kvcopy-sender-missing.yaml", Object: "kvcopy-sender-missing", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonKVCopySenderMissing},
	{File: "kvcopy-sender-duplicate.yaml", Object: "kvcopy-sender-duplicate", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonKVCopySenderDuplicate},
	{File: "role-conflict.yaml", Object: "conflict-second", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonRoleConflict,
		Also: map[v1alpha1.ConditionType]v1alpha1.ConditionReason{v1alpha1.ConditionProgrammed: v1alpha1.ReasonNotAccepted}},
	{File: "hintpolicy-not-found.yaml", Object: "hintpolicy-not-found", Condition: v1alpha1.ConditionResolvedRefs, Reason: v1alpha1.ReasonHintPolicyNotFound,
		Also: map[v1alpha1.ConditionType]v1alpha1.ConditionReason{v1alpha1.ConditionAccepted: v1alpha1.ReasonUnresolvedRefs}},
	{File: "hintpolicy-invalid.yaml", Object: "hintpolicy-invalid", Condition: v1alpha1.ConditionResolvedRefs, Reason: v1alpha1.ReasonHintPolicyInvalid,
		Also: map[v1alpha1.ConditionType]v1alpha1.ConditionReason{v1alpha1.ConditionAccepted: v1alpha1.ReasonInvalidParameters}},
	{File: "hintpolicy-invalid.yaml", Object: "retain-typo", Policy: true, Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonInvalidParameters},
	{File: "invalid-worker-selector.yaml", Object: "invalid-worker-selector", Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonInvalidWorkerSelector},

	{File: "hints-require-kv-mode.yaml", Rejected: "hints run only on the KV path"},
	{File: "invalid-router-mode.yaml", Rejected: `spec.routerMode: Unsupported value: "fastest"`},
	{File: "invalid-role.yaml", Rejected: `spec.role: Unsupported value: "Decode_Stage": supported values: "aggregated", "prefill", "decode", "encode"`},
	{File: "invalid-hint-name.yaml", Rejected: `spec.hints[0].name: Invalid value: "Retain_Long"`},
	{File: "duplicate-names.yaml", Rejected: "hint names must be unique within a role"},
	{File: "type-and-policyref.yaml", Rejected: "set exactly one of type (an inline hint policy) or policyRef"},
	{File: "too-many-hints.yaml", Rejected: "must have at most 32 items"},
}
