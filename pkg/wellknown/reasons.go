package wellknown

// Reasons of the hints config rules: the rules (pkg/hintsconfig) report
// them on their problems, the CLI and the sidecar print them, and the
// manager copies them into a RouterRole's or HintPolicy's Accepted
// condition. They are written here once; hintsconfig.Reason and
// v1alpha1.ConditionReason constants of the same names take these values,
// and api/v1alpha1/conditions.go documents each (docs/reference/conditions.md).
const (
	ReasonInvalidConfig          = "InvalidConfig"
	ReasonInvalidRole            = "InvalidRole"
	ReasonInvalidRouterMode      = "InvalidRouterMode"
	ReasonUnknownWorkerSelection = "UnknownWorkerSelection"
	ReasonInvalidParameters      = "InvalidParameters"
	ReasonUnknownHintType        = "UnknownHintType"
	ReasonInvalidHintName        = "InvalidHintName"
	ReasonDuplicateHintName      = "DuplicateHintName"
	ReasonTooManyHints           = "TooManyHints"
	ReasonHintsRequireKVMode     = "HintsRequireKVMode"
	ReasonKVCopySenderMissing    = "KVCopySenderMissing"
	ReasonKVCopySenderDuplicate  = "KVCopySenderDuplicate"
	ReasonPolicyFormCannotCarry  = "PolicyFormCannotCarry"

	// ReasonPresetOverridesParameters is a warning's, and the reason of
	// Accepted=True when a router preset takes precedence over a role's
	// cost-function parameters.
	ReasonPresetOverridesParameters = "PresetOverridesParameters"
)
