package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RouterMode is how a router books workers for a role: Dynamo's
// --router-mode (DYN_ROUTER_MODE), which a worker set may also set for
// itself. Only kv is the KV path, where the worker-selection policy and
// hint policies run.
// +kubebuilder:validation:Enum=kv;round-robin;random;power-of-two;least-loaded;device-aware-weighted;direct
type RouterMode string

// Router modes.
const (
	RouterModeKV                  RouterMode = "kv"
	RouterModeRoundRobin          RouterMode = "round-robin"
	RouterModeRandom              RouterMode = "random"
	RouterModePowerOfTwo          RouterMode = "power-of-two"
	RouterModeLeastLoaded         RouterMode = "least-loaded"
	RouterModeDeviceAwareWeighted RouterMode = "device-aware-weighted"
	RouterModeDirect              RouterMode = "direct"
)

// Roles: Dynamo's worker types, the only keys its router policy file's
// worker_selection takes.
const (
	RoleAggregated = "aggregated"
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
	RoleEncode     = "encode"
)

// MaxHints is the most hint items a RouterRole may list.
const MaxHints = 32

// RouterRoleSpec is what one router runs for one role.
//
// +kubebuilder:validation:XValidation:rule="!has(self.hints) || size(self.hints) == 0 || !has(self.routerMode) || self.routerMode == 'kv'",message="hints run only on the KV path: with a routerMode other than kv, leave hints out or set hints: []"
type RouterRoleSpec struct {
	// router is the name of the router whose pods run this role: the pods
	// labelled hints.kvrouter.io/router=<router> in this namespace. The
	// manager compiles every RouterRole of a router into the ConfigMap
	// "<router>-hints". A DNS label, at most 63 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Router string `json:"router"`

	// role is the worker type the router books workers for: aggregated,
	// prefill, decode or encode. These are Dynamo's worker types, the only
	// role keys the worker_selection of its router policy file accepts
	// (the compiled hints.yaml is that file), so no other name is taken.
	// At most one RouterRole per router may claim a role: when two do, the
	// older one (then the one whose name sorts first) wins and the other
	// reports Accepted=False with reason RoleConflict.
	// +required
	// +kubebuilder:validation:Enum=aggregated;prefill;decode;encode
	Role string `json:"role"`

	// routerMode is how the router books workers for this role, Dynamo's
	// --router-mode: kv (the KV path, where the worker-selection policy
	// and the hints run), round-robin, random, power-of-two, least-loaded,
	// device-aware-weighted or direct. It is not part of the policy file:
	// the manager compiles it into the ConfigMap's roles.yaml, and a
	// Dynamo router takes it from its own --router-mode flag. Hints run
	// only with kv. Defaults to kv.
	// +optional
	// +kubebuilder:default=kv
	RouterMode RouterMode `json:"routerMode,omitempty"`

	// workerSelection is the policy that chooses the worker for each
	// booking on the KV path.
	// +required
	WorkerSelection WorkerSelection `json:"workerSelection"`

	// hints lists the hint policies that build actions for the booked
	// worker, in the order they run. Leave it out to run the hint policies
	// registered by default under the worker-selection type (for kvcr:
	// kv-fetch and kv-evict); set it to [] to run none. Each item is either
	// an inline hint policy (type, optional name and parameters) or a
	// policyRef to a HintPolicy in this namespace. An item is known by its
	// name, else by its type; names must be unique within the role, so a
	// type listed twice needs a distinct name on each instance. At most 32
	// items, and only with routerMode kv.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(h, !(has(h.name) || has(h.type)) || self.exists_one(o, (has(o.name) ? o.name : (has(o.type) ? o.type : '')) == (has(h.name) ? h.name : h.type)))",message="hint names must be unique within a role: an item is known by its name, or by its type when it has no name; give each instance of a repeated type a distinct name"
	Hints []HintItem `json:"hints,omitzero"` // omitzero, not omitempty: absent (defaults) and [] (none) differ and must survive a round trip.

	// workerSelector selects the worker pods this role books, by label, in
	// this namespace: the role's worker pool. The manager checks that it is
	// a valid selector and compiles it into the router's ConfigMap (key
	// roles.yaml); the router sidecar watches the pods it picks
	// and sends this role's hints only to them, answering a booking for
	// any other worker with 204 and outcome not_in_pool. Leave it out and
	// the role's hints go to any registered worker.
	// +optional
	WorkerSelector *metav1.LabelSelector `json:"workerSelector,omitempty"`
}

// WorkerSelection is a worker-selection policy instance.
type WorkerSelection struct {
	// type is the worker-selection policy type, one linked into the
	// manager's build: dynamo-default-cost-fn (never commits KV copies),
	// kvcr (KV cache reuse: commits KV copies when shared_cache_multiplier
	// > 0), dynamo-two-tier-cost-fn, or a load-only type such as
	// dynamo-round-robin; or, for a router that declares its catalog (a
	// ConfigMap labelled hints.kvrouter.io/catalog-for), one it declares.
	// Letters, digits, '_', '.' and '-', as Dynamo spells types. An
	// unknown type is reported as Accepted=False, reason
	// UnknownWorkerSelection.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Type string `json:"type"`

	// parameters of the worker-selection policy, checked by its type: an
	// unknown key, a wrong type or an out-of-range value is reported as
	// Accepted=False, reason InvalidParameters. Leave it out for the
	// type's defaults; status and the compiled config show the effective
	// values.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
}

// HintItem is one entry of a RouterRole's hint list: an inline hint policy
// or a reference to a HintPolicy.
//
// +kubebuilder:validation:XValidation:rule="has(self.type) != has(self.policyRef)",message="set exactly one of type (an inline hint policy) or policyRef (a HintPolicy in this namespace)"
// +kubebuilder:validation:XValidation:rule="!has(self.policyRef) || !has(self.parameters)",message="a policyRef item takes no parameters: they belong to the referenced HintPolicy"
type HintItem struct {
	// type is the hint policy type of an inline hint, one linked into the
	// manager's build, such as kv-fetch, kv-retain or kv-evict, or one the
	// router's declared catalog holds, in its own spelling (Dynamo's
	// harness_prefetch). Exactly one of type and policyRef is set. An
	// unknown type is reported as Accepted=False, reason UnknownHintType.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Type string `json:"type,omitempty"`

	// name tells instances of one hint type apart within the role; it is
	// needed only where a type repeats, and must then be unique within the
	// role. It appears in the compiled config, metrics and logs. A DNS
	// label.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// parameters of an inline hint policy, checked by its type: an unknown
	// key, a wrong type or an out-of-range value is reported as
	// Accepted=False, reason InvalidParameters. Not allowed with
	// policyRef.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`

	// policyRef runs a HintPolicy of this namespace, with its type and
	// parameters, in this place of the list. A missing HintPolicy is
	// reported as ResolvedRefs=False, reason HintPolicyNotFound; an invalid
	// one as ResolvedRefs=False, reason HintPolicyInvalid. Exactly one of
	// type and policyRef is set.
	// +optional
	PolicyRef *HintPolicyReference `json:"policyRef,omitempty"`
}

// HintPolicyReference names a HintPolicy in the namespace of the referrer.
type HintPolicyReference struct {
	// name of the HintPolicy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// RouterRoleStatus is what the manager observed and did for a RouterRole.
type RouterRoleStatus struct {
	// observedGeneration is the metadata.generation the manager last
	// processed, written with every status write. While it is behind
	// metadata.generation the manager has not looked at the newest spec
	// yet: kstatus (Flux, kpt) reads the object as InProgress, and the
	// conditions are those of an older generation. 0 until the manager
	// first writes status.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the role: Accepted (the spec passes the catalog
	// rules), ResolvedRefs (every policyRef names a valid HintPolicy),
	// Programmed (the compiled config holding the role is written and every
	// router pod runs it) and Ready (all three, for kubectl wait). Two
	// more, for kstatus (Flux, kpt) and Argo CD, are present only while
	// True: Stalled (the spec is rejected, and waiting cannot fix it) and
	// Reconciling (the spec is accepted but does not run on every router
	// pod yet). Every condition carries the generation it describes:
	// Programmed keeps the generation that runs, which stays behind
	// metadata.generation while a newer spec is not accepted.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// effectiveHints are the hint policies that run for the role now, in
	// order, with defaults expanded and effective parameters. While a newer
	// spec is not accepted they are those of the last accepted generation.
	// Empty when nothing runs.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	EffectiveHints []EffectiveHint `json:"effectiveHints,omitempty"`

	// routerPods counts the router's pods and those that run the current
	// compiled config.
	// +optional
	RouterPods *RouterPods `json:"routerPods,omitempty"`
}

// EffectiveHint is a hint policy instance as it runs.
type EffectiveHint struct {
	// type is the hint policy type.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Type string `json:"type"`

	// name is the instance name, set where the role named it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// parameters are the effective parameters, defaults included.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
}

// RouterPods counts a router's pods against the config compiled for it.
type RouterPods struct {
	// hash is the content hash of the compiled config in the router's
	// ConfigMap (its hints.kvrouter.io/hash annotation).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Hash string `json:"hash,omitempty"`

	// total is the number of the router's pods (label
	// hints.kvrouter.io/router=<router>) that are not being deleted.
	// +required
	// +kubebuilder:validation:Minimum=0
	Total int32 `json:"total"`

	// upToDate is the number of those pods whose sidecar reports, in the
	// hints.kvrouter.io/applied-hash annotation, that it runs hash.
	// +required
	// +kubebuilder:validation:Minimum=0
	UpToDate int32 `json:"upToDate"`

	// summary is "upToDate/total", for the Programmed printer column.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Summary string `json:"summary,omitempty"`
}

// RouterRole configures what one router runs for one role: the
// worker-selection policy that books workers and the hint policies that
// tell the booked worker what to do with KV blocks. The manager checks it
// with the router's own start-up rules, compiles the RouterRoles of a
// router into the ConfigMap "<router>-hints" and reports, in status, whether
// the role is accepted and how many router pods run it.
//
// spec.router is a selectable field: `kubectl get rr --field-selector
// spec.router=NAME` lists the roles of one router (Kubernetes 1.31 or
// newer: selectable fields of custom resources are beta there, GA in 1.32).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rr,categories=kvhint
// +kubebuilder:printcolumn:name="Router",type=string,JSONPath=`.spec.router`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.routerMode`
// +kubebuilder:printcolumn:name="Selection",type=string,JSONPath=`.spec.workerSelection.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.routerPods.summary`,description="router pods that run the current config / all router pods"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.router`
type RouterRole struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the router runs for the role.
	// +required
	Spec RouterRoleSpec `json:"spec"`

	// status is what the manager observed. Until the manager first writes
	// it, the API server shows observedGeneration 0, so that GitOps tools
	// read a new object as not yet processed rather than as healthy.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status RouterRoleStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// RouterRoleList is a list of RouterRoles.
type RouterRoleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RouterRole `json:"items"`
}
