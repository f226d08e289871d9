package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MainContainerName is the container of a component's podTemplate that
// runs the component itself (for a frontend, Dynamo's Frontend); Dynamo's
// operator puts its defaults there, and every other container is a
// sidecar the user manages.
const MainContainerName = "main"

// ComponentType is the role of a component in a Dynamo graph. It decides
// the defaults Dynamo's operator gives the component and the value of the
// pod label nvidia.com/dynamo-component-type.
// +kubebuilder:validation:Enum=frontend;worker;prefill;decode;planner;epp
type ComponentType string

// The component types of Dynamo's v1beta1 API.
const (
	ComponentTypeFrontend ComponentType = "frontend"
	ComponentTypeWorker   ComponentType = "worker"
	ComponentTypePrefill  ComponentType = "prefill"
	ComponentTypeDecode   ComponentType = "decode"
	ComponentTypePlanner  ComponentType = "planner"
	ComponentTypeEPP      ComponentType = "epp"
)

// DynamoGraphDeploymentSpec is the desired graph: its components and what
// they share.
type DynamoGraphDeploymentSpec struct {
	// annotations are added to every object rendered for the graph and to
	// its pod templates. A component's own podTemplate annotations win on a
	// conflict.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// labels are added to every object rendered for the graph and to its
	// pod templates, with the same precedence as annotations.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// components are the parts of the graph (frontend, workers, planner,
	// endpoint picker), each with a name unique in the list regardless of
	// case. At most one component may have type epp. Components cannot be
	// added or removed after the graph is created (Dynamo's webhook
	// refuses it; here a transition rule stands in for the webhook).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=25
	// +kubebuilder:validation:XValidation:rule="self.filter(c, has(c.type) && c.type == 'epp').size() <= 1",message="at most one component may have type epp"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !has(a.name) || self.filter(b, has(b.name) && b.name.lowerAscii() == a.name.lowerAscii()).size() == 1)",message="component names must be unique case-insensitively"
	// +kubebuilder:validation:XValidation:rule="self.size() == oldSelf.size() && self.all(c, oldSelf.exists(o, o.name == c.name))",message="components cannot be added or removed after creation"
	Components []DynamoComponentDeploymentSharedSpec `json:"components,omitempty"`

	// env is put before every component's own environment in its main
	// container. A component entry of the same name wins and may refer to
	// the values of this list.
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// backendFramework is the inference engine the workers run.
	// +optional
	// +kubebuilder:validation:Enum=sglang;vllm;trtllm
	BackendFramework string `json:"backendFramework,omitempty"`
}

// DynamoComponentDeploymentSharedSpec is one component of a graph.
type DynamoComponentDeploymentSharedSpec struct {
	// name identifies the component in its graph. It is kept in labels and
	// in the status map, and it names the rendered objects (lower case).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$`
	ComponentName string `json:"name"`

	// type is the component's role in the graph. It may change after
	// creation: Dynamo's schema and webhook have no rule against it.
	// +optional
	ComponentType ComponentType `json:"type,omitempty"`

	// podTemplate is the component's pod. A new component has a container
	// named main with an image, into which Dynamo's operator merges its
	// defaults; the other containers are sidecars.
	// +optional
	PodTemplate *corev1.PodTemplateSpec `json:"podTemplate,omitempty"`

	// replicas is the number of pods of the component; 1 when unset. With
	// scalingAdapter set, an autoscaler owns it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// minAvailable is the number of replicas Grove gang-schedules and
	// keeps; refused on the Deployment path.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinAvailable *int32 `json:"minAvailable,omitempty"`

	// scalingAdapter, when present (even empty), hands replicas to
	// Dynamo's scaling adapter and its Scale subresource.
	// +optional
	ScalingAdapter *ScalingAdapter `json:"scalingAdapter,omitempty"`

	// frontendSidecar names a container of podTemplate that runs a
	// Frontend beside the component's main container.
	// +optional
	FrontendSidecar *string `json:"frontendSidecar,omitempty"`
}

// ScalingAdapter opts a component into Dynamo's scaling adapter by its
// presence; it has no settings in v1beta1.
type ScalingAdapter struct{}

// DGDState is the graph's lifecycle state as one word.
// +kubebuilder:validation:Enum=initializing;pending;successful;failed
type DGDState string

// The lifecycle states of a graph.
const (
	DGDStateInitializing DGDState = "initializing"
	DGDStatePending      DGDState = "pending"
	DGDStateSuccessful   DGDState = "successful"
	DGDStateFailed       DGDState = "failed"
)

// ComponentKind is the kind of object a component is rendered into.
// +kubebuilder:validation:Enum=PodClique;PodCliqueScalingGroup;Deployment;LeaderWorkerSet
type ComponentKind string

// The kinds of rendered objects.
const (
	ComponentKindPodClique             ComponentKind = "PodClique"
	ComponentKindPodCliqueScalingGroup ComponentKind = "PodCliqueScalingGroup"
	ComponentKindDeployment            ComponentKind = "Deployment"
	ComponentKindLeaderWorkerSet       ComponentKind = "LeaderWorkerSet"
)

// ConditionReady is the condition that says whether every component has
// rolled out and is ready.
const ConditionReady = "Ready"

// Reasons of the Ready condition, as Dynamo's operator writes them.
const (
	ReasonAllResourcesReady     = "all_resources_are_ready"
	ReasonUpdating              = "updating"
	ReasonPodsNotReady          = "pods_not_ready"
	ReasonMixedNotReadyReasons  = "mixed_not_ready_reasons"
	ReasonSomeResourcesNotReady = "some_resources_are_not_ready"
	ReasonRollingUpdate         = "rolling_update_in_progress"
)

// DynamoGraphDeploymentStatus is what Dynamo's operator last observed of
// the graph.
type DynamoGraphDeploymentStatus struct {
	// observedGeneration is the graph generation the operator last
	// rendered.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// state is the graph's lifecycle state.
	// +kubebuilder:default=initializing
	State DGDState `json:"state"`

	// conditions are the graph's conditions (Ready), merged by type.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// components holds each component's replica counts, by component
	// name.
	// +optional
	Components map[string]ComponentReplicaStatus `json:"components,omitempty"`
}

// ComponentReplicaStatus is the replica counts of one component, read from
// the object it is rendered into.
type ComponentReplicaStatus struct {
	// componentKind is the kind of the rendered object.
	// +required
	ComponentKind ComponentKind `json:"componentKind"`

	// componentNames are the names of the rendered objects: one, or two
	// while Dynamo's operator replaces one with another.
	// +optional
	ComponentNames []string `json:"componentNames,omitempty"`

	// replicas is the number of pods that are not terminated.
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`

	// updatedReplicas is the number of pods of the current template.
	// +kubebuilder:validation:Minimum=0
	UpdatedReplicas int32 `json:"updatedReplicas"`

	// readyReplicas is the number of ready pods.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyReplicas *int32 `json:"readyReplicas,omitempty"`

	// availableReplicas is the number of available pods.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AvailableReplicas *int32 `json:"availableReplicas,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=dgd
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether every component is rolled out and ready"
// +kubebuilder:printcolumn:name="Backend",type="string",JSONPath=`.spec.backendFramework`,description="Inference engine"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// DynamoGraphDeployment is a Dynamo inference graph: a frontend, workers
// and the other components, which Dynamo's operator renders into
// workloads.
type DynamoGraphDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired graph.
	Spec DynamoGraphDeploymentSpec `json:"spec,omitempty"`
	// status is what Dynamo's operator observed of the graph.
	Status DynamoGraphDeploymentStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DynamoGraphDeploymentList is a list of DynamoGraphDeployments.
type DynamoGraphDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DynamoGraphDeployment `json:"items"`
}

// DynamoComponentDeploymentSpec is one component as Dynamo's operator
// renders it from its graph.
type DynamoComponentDeploymentSpec struct {
	DynamoComponentDeploymentSharedSpec `json:",inline"`

	// backendFramework is the inference engine, copied from the graph.
	// +optional
	// +kubebuilder:validation:Enum=sglang;vllm;trtllm
	BackendFramework string `json:"backendFramework,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=dcd

// DynamoComponentDeployment is one component of a graph, which Dynamo's
// operator creates from the graph and renders into a Deployment it owns.
// Only the operator writes it.
type DynamoComponentDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the component.
	Spec DynamoComponentDeploymentSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// DynamoComponentDeploymentList is a list of DynamoComponentDeployments.
type DynamoComponentDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DynamoComponentDeployment `json:"items"`
}

// Component returns the component of the given name, or nil.
func (d *DynamoGraphDeployment) Component(name string) *DynamoComponentDeploymentSharedSpec {
	for i := range d.Spec.Components {
		if d.Spec.Components[i].ComponentName == name {
			return &d.Spec.Components[i]
		}
	}
	return nil
}
