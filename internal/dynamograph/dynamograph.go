// Package dynamograph reads Dynamo's DynamoGraphDeployment (DGD), the
// workload Dynamo is deployed as on Kubernetes, as far as the manager
// needs it to drive a restart-mode router: which component runs the
// router, its pod template, the graph-wide environment, and the status
// Dynamo's operator reports. The manager does not link Dynamo's API
// module: a DGD is read from its unstructured form into the subset of
// Dynamo's v1beta1 schema declared here (field names and JSON names as
// in deploy/operator/api/v1beta1 of ai-dynamo/dynamo), and written only
// by server-side apply of the manager's own entries (see package
// controllers).
//
// +kubebuilder:skip
package dynamograph

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the DGD's storage version, the one the manager reads
// and writes (v1alpha1 is served through Dynamo's conversion webhook and
// deprecated).
var GroupVersion = schema.GroupVersion{Group: "nvidia.com", Version: "v1beta1"}

// Kind, Resource and GVK name the DGD.
const (
	Kind     = "DynamoGraphDeployment"
	Resource = "dynamographdeployments"
)

// GVK is the DGD's group, version and kind.
var GVK = GroupVersion.WithKind(Kind)

// Labels Dynamo's operator puts on the pods of a component, and the
// annotations on a DGD's metadata that choose how it is rendered.
const (
	GraphLabel     = "nvidia.com/dynamo-graph-deployment-name"
	ComponentLabel = "nvidia.com/dynamo-component"

	// EnableGroveAnnotation "false" renders each component as a
	// Deployment; otherwise, where Grove is installed, as a PodClique of
	// one PodCliqueSet.
	EnableGroveAnnotation = "nvidia.com/enable-grove"
	// GroveUpdateStrategyAnnotation passes the PodCliqueSet update
	// strategy: RollingRecreate (Grove's default) or OnDelete, under
	// which pods take a new template only when deleted.
	GroveUpdateStrategyAnnotation = "nvidia.com/grove-update-strategy"
	GroveOnDelete                 = "OnDelete"
)

// Component types that host a router, and the container Dynamo's
// operator injects its defaults into.
const (
	TypeFrontend  = "frontend"
	TypeEPP       = "epp"
	MainContainer = "main"
)

// Settings a router component's template is checked for.
const (
	// EPPMaxBatchedTokensEnv must be set on an EPP whose router is
	// given a policy config.
	EPPMaxBatchedTokensEnv = "DYN_EPP_MAX_NUM_BATCHED_TOKENS"
)

// Graph is a DGD: the subset of Dynamo's v1beta1 schema the manager reads.
type Graph struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
	// Object is the DGD as read, all of its fields.
	Object map[string]any `json:"-"`
}

// Spec is a DGD's spec.
type Spec struct {
	// Env is prepended to every component's environment; a component's
	// own entry of the same name wins.
	Env        []corev1.EnvVar `json:"env,omitempty"`
	Components []Component     `json:"components,omitempty"`
}

// Component is one entry of spec.components, keyed by name.
type Component struct {
	Name        string                  `json:"name"`
	Type        string                  `json:"type,omitempty"`
	Replicas    *int32                  `json:"replicas,omitempty"`
	PodTemplate *corev1.PodTemplateSpec `json:"podTemplate,omitempty"`
	// FrontendSidecar names a container of the pod template that runs a
	// Frontend beside the component's main container (a worker's).
	FrontendSidecar *string `json:"frontendSidecar,omitempty"`
	// RuntimeVersion is the Dynamo version the component runs (semver;
	// Dynamo's webhook defaults it from the main image's tag).
	RuntimeVersion string `json:"runtimeVersion,omitempty"`
}

// Status is what Dynamo's operator reports of a DGD.
type Status struct {
	// ObservedGeneration is set at the end of every reconcile of Dynamo's
	// operator that ended without error, Ready or not.
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	State              string             `json:"state,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	// Components are keyed by component name.
	Components map[string]ComponentStatus `json:"components,omitempty"`
}

// States of Status.State.
const (
	StateSuccessful = "successful"
	StateFailed     = "failed"
)

// ConditionReady is the DGD's condition of all components ready.
const ConditionReady = "Ready"

// ComponentStatus is one component's replicas as Dynamo reports them.
type ComponentStatus struct {
	ComponentKind     string   `json:"componentKind,omitempty"`
	ComponentNames    []string `json:"componentNames,omitempty"`
	Replicas          int32    `json:"replicas"`
	UpdatedReplicas   int32    `json:"updatedReplicas"`
	ReadyReplicas     *int32   `json:"readyReplicas,omitempty"`
	AvailableReplicas *int32   `json:"availableReplicas,omitempty"`
}

// FromUnstructured reads a DGD. Fields outside the subset are ignored; a
// field of the subset with another shape than Dynamo's schema gives it is
// an error naming the DGD.
func FromUnstructured(u *unstructured.Unstructured) (*Graph, error) {
	var g Graph
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
		return nil, fmt.Errorf("DynamoGraphDeployment %s: not read as nvidia.com/v1beta1: %w", u.GetName(), err)
	}
	g.Object = u.Object
	return &g, nil
}

// Component returns the component of that name, or nil.
func (g *Graph) Component(name string) *Component {
	for i := range g.Spec.Components {
		if g.Spec.Components[i].Name == name {
			return &g.Spec.Components[i]
		}
	}
	return nil
}

// OnGrove reports whether Dynamo's operator renders the DGD's components
// as Grove PodCliques (where Grove is installed), not Deployments.
func (g *Graph) OnGrove() bool {
	return !strings.EqualFold(g.Annotations[EnableGroveAnnotation], "false")
}

// Condition returns the DGD's condition of that type, or nil.
func (g *Graph) Condition(t string) *metav1.Condition {
	for i := range g.Status.Conditions {
		if g.Status.Conditions[i].Type == t {
			return &g.Status.Conditions[i]
		}
	}
	return nil
}

// Host is where a DGD runs its router: a component and the container of
// its pod template that runs the router.
type Host struct {
	Component *Component
	Container string
	// Sidecar is true when the router is a worker's Frontend sidecar: a
	// change to its template rolls the workers too.
	Sidecar bool
}

// FindHost finds the component that runs the DGD's router. name, when not
// empty, names it (the opt-in annotation's value); otherwise it is found
// by type: the one EPP (the Gateway API topology), else the one
// frontend, else the one component with a Frontend sidecar. An error
// says why none or more than one could be chosen.
func (g *Graph) FindHost(name string) (Host, error) {
	if name != "" {
		c := g.Component(name)
		if c == nil {
			return Host{}, fmt.Errorf("names component %q, but spec.components has no component of that name (components: %s)", name, g.componentNames())
		}
		return hostOf(c)
	}
	for _, pick := range []func(*Component) bool{
		func(c *Component) bool { return c.Type == TypeEPP },
		func(c *Component) bool { return c.Type == TypeFrontend },
		func(c *Component) bool { return c.FrontendSidecar != nil && *c.FrontendSidecar != "" },
	} {
		var found []*Component
		for i := range g.Spec.Components {
			if pick(&g.Spec.Components[i]) {
				found = append(found, &g.Spec.Components[i])
			}
		}
		switch len(found) {
		case 0:
			continue
		case 1:
			return hostOf(found[0])
		default:
			var names []string
			for _, c := range found {
				names = append(names, c.Name)
			}
			return Host{}, fmt.Errorf("is empty and more than one component could run the router (%s); name one as the annotation's value", strings.Join(names, ", "))
		}
	}
	return Host{}, fmt.Errorf("is empty and no component runs a router: none of type %s or %s, and none with a frontendSidecar (components: %s)", TypeEPP, TypeFrontend, g.componentNames())
}

func hostOf(c *Component) (Host, error) {
	switch {
	case c.Type == TypeFrontend || c.Type == TypeEPP:
		return Host{Component: c, Container: MainContainer}, nil
	case c.FrontendSidecar != nil && *c.FrontendSidecar != "":
		return Host{Component: c, Container: *c.FrontendSidecar, Sidecar: true}, nil
	}
	return Host{}, fmt.Errorf("names component %q of type %q, which runs no router: name a component of type %s or %s, or one with a frontendSidecar", c.Name, c.Type, TypeFrontend, TypeEPP)
}

func (g *Graph) componentNames() string {
	if len(g.Spec.Components) == 0 {
		return "none"
	}
	var names []string
	for _, c := range g.Spec.Components {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// ReadyStatus is the status of a DGD's Ready condition (ConditionReady),
// empty without one. It reads only the conditions, so that it is cheap
// on every watch event.
func ReadyStatus(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == ConditionReady {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
