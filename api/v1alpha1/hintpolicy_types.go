package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HintPolicySpec is a hint policy instance: a type and its parameters.
type HintPolicySpec struct {
	// type is the hint policy type, one linked into the manager's build,
	// such as kv-fetch, kv-retain or kv-evict, or one declared by a
	// router's catalog in this namespace (a ConfigMap labelled
	// hints.kvrouter.io/catalog-for), in the router's own spelling, such
	// as Dynamo's harness_prefetch. An unknown type is reported as
	// Accepted=False, reason UnknownHintType.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Type string `json:"type"`

	// parameters of the hint policy, checked by its type: an unknown key, a
	// wrong type or an out-of-range value is reported as Accepted=False,
	// reason InvalidParameters. Leave it out for the type's defaults.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
}

// HintPolicyStatus is what the manager observed for a HintPolicy.
type HintPolicyStatus struct {
	// observedGeneration is the metadata.generation the manager last
	// processed, written with every status write; while it is behind
	// metadata.generation, kstatus (Flux, kpt) reads the policy as
	// InProgress. 0 until the manager first writes status.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the policy: Accepted says whether its type is
	// linked and its parameters are valid, on their own, before any role
	// lists it. Stalled, present only while True, repeats a rejection for
	// kstatus (Flux, kpt) and Argo CD.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// usedBy lists the RouterRoles of this namespace that reference the
	// policy, by name, sorted.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	UsedBy []string `json:"usedBy,omitempty"`
}

// HintPolicy is a named, reusable hint policy instance that RouterRoles of
// its namespace run through a policyRef hint item. Changing it re-compiles
// every role that references it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hp,categories=kvhint
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Used-By",type=string,JSONPath=`.status.usedBy`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HintPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the hint policy instance.
	// +required
	Spec HintPolicySpec `json:"spec"`

	// status is what the manager observed; observedGeneration reads 0
	// until the manager first writes it.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status HintPolicyStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// HintPolicyList is a list of HintPolicies.
type HintPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HintPolicy `json:"items"`
}
