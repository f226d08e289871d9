package v1alpha1

import "github.com/kvrouter/kv-hint-operator/pkg/wellknown"

// ConditionType is the type of a RouterRole or HintPolicy condition.
type ConditionType string

// Condition types.
const (
	// ConditionAccepted is True when the spec passes the catalog rules (the
	// router's start-up rules) and, for a RouterRole, no older RouterRole
	// claims the same router and role.
	ConditionAccepted ConditionType = "Accepted"

	// ConditionResolvedRefs is True when every policyRef of a RouterRole
	// names a HintPolicy of its namespace that is itself accepted.
	ConditionResolvedRefs ConditionType = "ResolvedRefs"

	// ConditionProgrammed is True when the compiled config that holds the
	// role is written to the router's ConfigMap and every router pod runs
	// it. Its observedGeneration is the generation that runs.
	ConditionProgrammed ConditionType = "Programmed"

	// ConditionReady is True when Accepted, ResolvedRefs and Programmed are
	// all True for the current generation: the spec as written runs on
	// every router pod. When False its reason is that of the first of the
	// three that is not True.
	ConditionReady ConditionType = "Ready"

	// ConditionStalled is True, and present only then, while the current
	// generation is rejected for a reason that waiting cannot fix: Accepted
	// or ResolvedRefs is False. Its reason is that of Ready (the first
	// failing condition's) and its message names every failing condition.
	// It follows kstatus's "abnormal-true" convention, under which Flux
	// and kpt read the object as Failed and stop waiting.
	ConditionStalled ConditionType = "Stalled"

	// ConditionReconciling is True, and present only then, while the
	// current generation is accepted but does not run on every router pod
	// yet (Programmed False, or Programmed for an older generation). Its
	// reason is Programmed's (Pending, NoRouterPods). kstatus reads it as
	// InProgress.
	ConditionReconciling ConditionType = "Reconciling"

	// ConditionPolicyEjected is True, and present only then, while the
	// sidecar of at least one router pod has a hint policy of the role
	// ejected from its path (it overran again and again, or did not
	// return within its hard deadline; bookings answer without it until
	// it is re-admitted on probation). Its message names each ejected
	// policy, on how many of the router's pods and why. It is about what
	// the pods run, not the spec: Ready keeps its meaning (the spec runs
	// on every router pod) and stays True, so kstatus reads the object as
	// Current, and Argo CD's health check as Healthy with this message.
	ConditionPolicyEjected ConditionType = "PolicyEjected"
)

// ConditionReason is the machine-readable reason of a condition.
type ConditionReason string

// Reasons shared by the conditions when True.
const (
	ReasonAccepted     ConditionReason = "Accepted"
	ReasonResolvedRefs ConditionReason = "ResolvedRefs"
	ReasonProgrammed   ConditionReason = "Programmed"
	ReasonReady        ConditionReason = "Ready"
)

// ReasonPresetOverridesParameters is the reason of Accepted=True for a
// role on the KV path whose router's Dynamo Frontend sets a router preset
// of its dialect (--agentic, --load-aware, or their variables): the
// preset takes precedence over the role's cost-function parameters. Its
// value is pkg/wellknown's, which the rules (pkg/hintsconfig) report too.
const ReasonPresetOverridesParameters ConditionReason = wellknown.ReasonPresetOverridesParameters

// ReasonPolicyEjected is the reason of PolicyEjected=True.
const ReasonPolicyEjected ConditionReason = "PolicyEjected"

// Reasons of Accepted=False that come from the catalog rules. Their values
// are written once, in pkg/wellknown, and the Reason constants of the rules
// (pkg/hintsconfig), which the CLI and the sidecar report for the same
// rule, take the same; a test (internal/rolegraph/reasons_test.go) checks
// that each of pkg/wellknown's reasons is documented here.
const (
	// ReasonInvalidConfig: the compiled policy file as a whole breaks a
	// rule of the router's (no role at all, say). The message names the
	// rule; fix the roles it names.
	ReasonInvalidConfig ConditionReason = wellknown.ReasonInvalidConfig

	// ReasonInvalidRole: spec.role is not one the router knows
	// (aggregated, prefill, decode, encode). The API server refuses it at
	// apply; kvhint validate reports it offline.
	ReasonInvalidRole ConditionReason = wellknown.ReasonInvalidRole

	// ReasonInvalidRouterMode: spec.routerMode is not one the router
	// knows. The API server refuses it at apply; kvhint validate reports
	// it offline.
	ReasonInvalidRouterMode ConditionReason = wellknown.ReasonInvalidRouterMode

	// ReasonUnknownWorkerSelection: workerSelection.type is not linked
	// into this build; the message lists those that are. Use a listed
	// type, or build kvhint with the plugin.
	ReasonUnknownWorkerSelection ConditionReason = wellknown.ReasonUnknownWorkerSelection

	// ReasonInvalidParameters: a parameter is unknown, of the wrong type
	// or out of range; the message names the hint, its type, the key and
	// the range. Fix the parameter.
	ReasonInvalidParameters ConditionReason = wellknown.ReasonInvalidParameters

	// ReasonUnknownHintType: a hint type is not linked into this build;
	// the message lists those that are. Use a listed type.
	ReasonUnknownHintType ConditionReason = wellknown.ReasonUnknownHintType

	// ReasonInvalidHintName: a hint's name is not a valid name. The API
	// server refuses it at apply; kvhint validate reports it offline.
	ReasonInvalidHintName ConditionReason = wellknown.ReasonInvalidHintName

	// ReasonDuplicateHintName: two hints are known by the same name (an
	// item is known by its name, else by its type), for example an inline
	// kv-retain and an unnamed policyRef to a kv-retain HintPolicy; the
	// message names both. Give one a name.
	ReasonDuplicateHintName ConditionReason = wellknown.ReasonDuplicateHintName

	// ReasonTooManyHints: the role lists more than 32 hints. The API
	// server refuses it at apply; kvhint validate reports it offline.
	ReasonTooManyHints ConditionReason = wellknown.ReasonTooManyHints

	// ReasonHintsRequireKVMode: the role lists hints, but runs off the KV
	// path: its routerMode, or for a restart-mode router the
	// --router-mode or DYN_ROUTER_MODE its pod template starts it with
	// (absent: round-robin), is not kv; the message names the flag, its
	// value and the container. Start the router with --router-mode kv, or
	// set hints: [].
	ReasonHintsRequireKVMode ConditionReason = wellknown.ReasonHintsRequireKVMode

	// ReasonKVCopySenderMissing: the selection commits KV copies (kvcr)
	// but no hint policy sends them. Add kv-fetch, or leave hints out for
	// the selection's defaults.
	ReasonKVCopySenderMissing ConditionReason = wellknown.ReasonKVCopySenderMissing

	// ReasonKVCopySenderDuplicate: two hint policies of the role send KV
	// copies. Keep one.
	ReasonKVCopySenderDuplicate ConditionReason = wellknown.ReasonKVCopySenderDuplicate

	// ReasonPolicyFormCannotCarry: the router's declared catalog says its
	// build reads the released policy-file form (policyFileForm:
	// RouterWideHint: one kv_hint_policy for the whole router), and the
	// router's roles on the KV path do not all run one and the same single
	// hint policy. The message names the form and what each role runs.
	ReasonPolicyFormCannotCarry ConditionReason = wellknown.ReasonPolicyFormCannotCarry
)

// Reasons of Accepted=False that come from the graph of objects rather than
// from one role's spec.
const (
	// ReasonRoleConflict: another RouterRole, older (or, as old, with a name
	// that sorts first), claims the same router and role.
	ReasonRoleConflict ConditionReason = "RoleConflict"

	// ReasonUnresolvedRefs: a policyRef names no HintPolicy, so the role
	// cannot be checked yet; ResolvedRefs says which.
	ReasonUnresolvedRefs ConditionReason = "UnresolvedRefs"

	// ReasonInvalidCatalog: the router declares its own policy catalog (a
	// ConfigMap labelled hints.kvrouter.io/catalog-for: <router>), and the
	// declaration cannot be used: the role is not checked, it keeps its
	// last good entry, and the router's ConfigMap is left as it is.
	ReasonInvalidCatalog ConditionReason = "InvalidCatalog"

	// ReasonCatalogConflict: more than one ConfigMap declares the router's
	// catalog; as for InvalidCatalog, nothing is checked or written until
	// one is left.
	ReasonCatalogConflict ConditionReason = "CatalogConflict"

	// ReasonInvalidWorkerSelector: spec.workerSelector is not a valid label
	// selector (an unknown operator, say).
	ReasonInvalidWorkerSelector ConditionReason = "InvalidWorkerSelector"
)

// Reasons of ResolvedRefs=False.
const (
	// ReasonHintPolicyNotFound: a policyRef names no HintPolicy in the
	// namespace.
	ReasonHintPolicyNotFound ConditionReason = "HintPolicyNotFound"

	// ReasonHintPolicyInvalid: a policyRef names a HintPolicy that is not
	// accepted; Accepted carries the catalog reason.
	ReasonHintPolicyInvalid ConditionReason = "HintPolicyInvalid"
)

// Reasons of Programmed=False.
const (
	// ReasonPending: the config is written, but not every router pod
	// reports that it runs it yet.
	ReasonPending ConditionReason = "Pending"

	// ReasonNoRouterPods: the config is written, but the router has no pods
	// to run it; the role does not run anywhere, so it is not Ready.
	ReasonNoRouterPods ConditionReason = "NoRouterPods"

	// ReasonNotAccepted: nothing of the role is in the compiled config: it
	// is not accepted and no earlier generation of it was.
	ReasonNotAccepted ConditionReason = "NotAccepted"

	// ReasonConfigMapConflict: a ConfigMap named "<router>-hints" exists
	// that the manager did not create (it has neither the managed-by label
	// nor a RouterRole owner). The manager never adopts, overwrites or
	// deletes it, so the role's config cannot be written.
	ReasonConfigMapConflict ConditionReason = "ConfigMapConflict"

	// ReasonRolloutFailed: a restart-mode router's Deployment reports
	// Progressing=False with reason ProgressDeadlineExceeded: its rollout
	// of the config stopped. The message carries the Deployment's. Like
	// ConfigMapConflict it sets Stalled, which kstatus reads as Failed.
	ReasonRolloutFailed ConditionReason = "RolloutFailed"

	// ReasonPolicyFileNotRead: a restart-mode router's container would
	// not read the file the manager mounts: its template's own
	// --router-policy-config or DYN_ROUTER_POLICY_CONFIG names another
	// path (not overwritten), or the opt-in names no container of the
	// template. The config is compiled, but nothing is written to the
	// workload. It sets Stalled.
	ReasonPolicyFileNotRead ConditionReason = "PolicyFileNotRead"

	// ReasonInvalidRouterWorkload: the opt-in of a restart-mode router's
	// workload cannot be followed: it names no component (or container)
	// that runs a router, the component has no pod template, or its pods
	// would not carry RouterLabel, by which they are counted. Nothing is
	// written to the workload. It sets Stalled.
	ReasonInvalidRouterWorkload ConditionReason = "InvalidRouterWorkload"

	// ReasonRouterWouldNotStart: the router would refuse to start with
	// the compiled policy file as its template starts it: an EPP without
	// DYN_EPP_MAX_NUM_BATCHED_TOKENS, or a setting that picks a
	// worker-selection instance the file does not have. Nothing is
	// written to the workload. It sets Stalled.
	ReasonRouterWouldNotStart ConditionReason = "RouterWouldNotStart"

	// ReasonUpdateStrategyOnDelete: a DynamoGraphDeployment rendered on
	// Grove with nvidia.com/grove-update-strategy: OnDelete. Its pods take
	// a new template only when deleted, so no write of the manager's would
	// reach them; nothing is written. It sets Stalled.
	ReasonUpdateStrategyOnDelete ConditionReason = "UpdateStrategyOnDelete"

	// ReasonPolicyConfigNotWritten: the manager's write of the compiled
	// config to a restart-mode workload was refused, by the API server
	// (an admission policy or webhook, the schema, a dry run) or by the
	// manager's own check of a dry run's result. The message names the
	// workload and says why; the router's pods are counted against the
	// config the workload still references, and the write is tried again.
	// It sets Stalled.
	ReasonPolicyConfigNotWritten ConditionReason = "PolicyConfigNotWritten"
)

// Condition types of a RouterRollout, beside Ready, Reconciling and
// Stalled.
const (
	// ConditionProgressing is True while a candidate config moves through
	// the rollout's steps (reason Step, message such as "step 2/4 (canary
	// 10%): 3 of 3 pods on candidate 0123456789abcdef"), and False when no
	// candidate is in flight (reason Idle, Promoted or RolledBack) or the
	// rollout waits (reason Paused or Inconclusive).
	ConditionProgressing ConditionType = "Progressing"

	// ConditionPaused is True while the rollout holds a candidate at its
	// step: spec.paused (reason Paused) or an Inconclusive analysis
	// (reason Inconclusive; resume with spec.paused toggled, or the
	// annotation hints.kvrouter.io/resume naming the candidate).
	ConditionPaused ConditionType = "Paused"

	// ConditionPromoted is True when the last candidate passed every step
	// (reason Promoted) or was promoted by hand (reason ManualPromote), and
	// is the router's stable config.
	ConditionPromoted ConditionType = "Promoted"

	// ConditionRolledBack is True when the last candidate was rolled back:
	// its reason is the failed measurement's (PrefixHitDrop,
	// TTFTIncrease, ErrorRateIncrease, CandidateRefused, ...) or Aborted,
	// and its message names the metric, the baseline and canary figures
	// and the samples.
	ConditionRolledBack ConditionType = "RolledBack"
)

// Reasons of a RouterRollout's conditions.
const (
	// ReasonStep: Progressing=True, a candidate is at a step; the message
	// names the step, its stage and how many pods run the candidate.
	ReasonStep ConditionReason = "Step"

	// ReasonIdle: no candidate is in flight and none was promoted or
	// rolled back yet (or the last one was withdrawn: the RouterRoles
	// compile to the stable config again).
	ReasonIdle ConditionReason = "Idle"

	// ReasonPaused: spec.paused holds the candidate at its step.
	ReasonPaused ConditionReason = "Paused"

	// ReasonInconclusive: a measurement could not judge (too few samples,
	// such as when the router has no traffic, or pods that did not
	// answer): the candidate is held at its step, neither promoted nor
	// rolled back. Toggle spec.paused or set the annotation
	// hints.kvrouter.io/resume to the candidate's hash to go on.
	ReasonInconclusive ConditionReason = "Inconclusive"

	// ReasonPromoted: the candidate passed every step and is the stable
	// config.
	ReasonPromoted ConditionReason = "Promoted"

	// ReasonManualPromote: the annotation hints.kvrouter.io/promote named
	// the candidate, which skipped its remaining steps.
	ReasonManualPromote ConditionReason = "ManualPromote"

	// ReasonRolledBack: on a RouterRole, Programmed=False because the
	// router's rollout rolled back the config the role's current spec
	// compiled into; the router pods run the stable config. The message
	// says why (the RouterRollout's status.lastRollback). Change the
	// role's spec to try another config. On a RouterRollout, the reason
	// of Ready=False and Stalled=True after a rollback.
	ReasonRolledBack ConditionReason = "RolledBack"

	// ReasonStaged: on a RouterRole, Programmed=False (and Ready=False,
	// Reconciling=True) while the config its current spec compiled into
	// is the candidate of the router's RouterRollout: the router pods run
	// it beside the stable config in the rollout's current step (the
	// message names it) until it is promoted.
	ReasonStaged ConditionReason = "Staged"

	// ReasonCandidateRefused: a router pod's sidecar refused the candidate
	// (it does not load; the pod and the sidecar's error are named), which
	// fails the step at once.
	ReasonCandidateRefused ConditionReason = "CandidateRefused"

	// ReasonAborted: the annotation hints.kvrouter.io/abort named the
	// candidate, which was rolled back.
	ReasonAborted ConditionReason = "Aborted"

	// ReasonCandidateInFlight: Ready=False while a candidate is staged.
	ReasonCandidateInFlight ConditionReason = "CandidateInFlight"

	// ReasonRolloutConflict: another RouterRollout, older (or as old, with
	// a name that sorts first), names the same router; this one does
	// nothing. Delete one of them.
	ReasonRolloutConflict ConditionReason = "RolloutConflict"

	// ReasonRestartModeRouter: the router's pods read their config only
	// at start-up and run in a DynamoGraphDeployment: Dynamo has no
	// partition or pause of a component's pods, so configs are not
	// staged; changes reach them as before, by Dynamo's own rolling
	// update. (A restart-mode Deployment is staged pod by pod: one pod
	// first, then the rest.)
	ReasonRestartModeRouter ConditionReason = "RestartModeRouter"
)
