package dynamo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// Labels and annotations Dynamo's operator puts on what it renders.
const (
	// LabelGraph names the DynamoGraphDeployment a workload and its pods
	// belong to.
	LabelGraph = "nvidia.com/dynamo-graph-deployment-name"
	// LabelComponent names the component (as spelled in the graph).
	LabelComponent = "nvidia.com/dynamo-component"
	// LabelComponentType is the component's type (frontend, worker, ...).
	LabelComponentType = "nvidia.com/dynamo-component-type"
	// LabelSelector is the label a rendered Deployment selects its pods
	// by: the Deployment's name.
	LabelSelector = "nvidia.com/selector"

	// AnnotationLastAppliedHash is the hash of the spec the operator last
	// wrote on a rendered object.
	AnnotationLastAppliedHash = "nvidia.com/last-applied-hash"
	// AnnotationLastAppliedGeneration is the object's generation after the
	// operator's last write; a greater generation means someone else
	// changed the spec, and the operator writes its own back.
	AnnotationLastAppliedGeneration = "nvidia.com/last-applied-generation"

	// AnnotationEnableGrove on a graph picks Grove ("true") or the
	// Deployment path ("false"). The stand-in renders Deployments for
	// every graph, as Dynamo's operator does on a cluster without Grove.
	AnnotationEnableGrove = "nvidia.com/enable-grove"
)

// defaultReplicas is a component's replica count when it sets none.
const defaultReplicas int32 = 1

// DeploymentName is the name of the DynamoComponentDeployment, and of the
// Deployment it owns, that a component other than a worker is rendered
// into: {graph}-{component}, the component's name in lower case. A worker
// component's name has the graph's worker hash after it (ComponentName).
func DeploymentName(graph, component string) string {
	return graph + "-" + strings.ToLower(component)
}

// IsWorker reports whether Dynamo's operator rolls a component of type t
// as a worker: a worker's objects are named after the graph's worker hash,
// and a change of any worker's spec rolls them onto new objects.
func IsWorker(t v1beta1.ComponentType) bool {
	switch t {
	case v1beta1.ComponentTypeWorker, v1beta1.ComponentTypePrefill, v1beta1.ComponentTypeDecode:
		return true
	}
	return false
}

// WorkerHash is the graph's worker hash: eight hex digits of a SHA-256 over
// the specs of its worker components, in spec order. It moves when a
// worker's spec does, and with it the names of every worker's objects.
func WorkerHash(dgd *v1beta1.DynamoGraphDeployment) string {
	var workers []*v1beta1.DynamoComponentDeploymentSharedSpec
	for i := range dgd.Spec.Components {
		if IsWorker(dgd.Spec.Components[i].ComponentType) {
			workers = append(workers, &dgd.Spec.Components[i])
		}
	}
	b, err := json.Marshal(workers)
	if err != nil {
		// The spec came from JSON; it always encodes again.
		panic(fmt.Sprintf("encoding the worker components of %s: %v", dgd.Name, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// ComponentName is the name of the DynamoComponentDeployment a component
// is rendered into, and of the Deployment that DynamoComponentDeployment
// owns: {graph}-{component}-{worker hash} for a worker, as Dynamo's
// operator names them, else DeploymentName.
func ComponentName(dgd *v1beta1.DynamoGraphDeployment, comp *v1beta1.DynamoComponentDeploymentSharedSpec) string {
	if IsWorker(comp.ComponentType) {
		return DeploymentName(dgd.Name, comp.ComponentName) + "-" + WorkerHash(dgd)
	}
	return DeploymentName(dgd.Name, comp.ComponentName)
}

// RenderDeployment returns the Deployment the stand-in renders for one
// component of a graph (named ComponentName), without owner reference and
// without the last-applied annotations (the write adds them).
func RenderDeployment(dgd *v1beta1.DynamoGraphDeployment, comp *v1beta1.DynamoComponentDeploymentSharedSpec) *appsv1.Deployment {
	name := ComponentName(dgd, comp)
	own := map[string]string{
		LabelGraph:         dgd.Name,
		LabelComponent:     comp.ComponentName,
		LabelComponentType: string(comp.ComponentType),
		LabelSelector:      name,
	}

	tmpl := corev1.PodTemplateSpec{}
	if comp.PodTemplate != nil {
		tmpl = *comp.PodTemplate.DeepCopy()
	}
	// Graph-wide labels and annotations first, the component's own over
	// them, Dynamo's own labels over both (the selector must hold).
	tmpl.Labels = merged(dgd.Spec.Labels, tmpl.Labels, own)
	tmpl.Annotations = merged(dgd.Spec.Annotations, tmpl.Annotations)
	if len(tmpl.Annotations) == 0 {
		tmpl.Annotations = nil
	}
	for i := range tmpl.Spec.Containers {
		c := &tmpl.Spec.Containers[i]
		if c.Name != v1beta1.MainContainerName {
			continue
		}
		c.Env = graphEnv(dgd.Spec.Env, c.Env)
		if comp.ComponentType == v1beta1.ComponentTypeFrontend && len(c.Command) == 0 {
			// Dynamo's frontend defaults: python3 as the command and the
			// module as its arguments, unless the user gave arguments.
			c.Command = []string{"python3"}
			if len(c.Args) == 0 {
				c.Args = []string{"-m", "dynamo.frontend"}
			}
		}
	}

	replicas := defaultReplicas
	if comp.Replicas != nil {
		replicas = *comp.Replicas
	}
	quarter := intstr.FromString("25%")
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   dgd.Namespace,
			Labels:      merged(dgd.Spec.Labels, own),
			Annotations: merged(dgd.Spec.Annotations),
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelSelector: name}},
			Template: tmpl,
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &quarter, MaxUnavailable: &quarter},
			},
		},
	}
}

// graphEnv puts the graph's env before the container's, leaving out each
// graph entry the container sets itself, so every name appears once with
// the component's value.
func graphEnv(graph, own []corev1.EnvVar) []corev1.EnvVar {
	if len(graph) == 0 {
		return own
	}
	set := make(map[string]bool, len(own))
	for _, e := range own {
		set[e.Name] = true
	}
	out := make([]corev1.EnvVar, 0, len(graph)+len(own))
	seen := map[string]bool{}
	for _, e := range graph {
		if set[e.Name] || seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		out = append(out, *e.DeepCopy())
	}
	return append(out, own...)
}

// merged returns the union of the maps, later ones winning.
func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// specHash is the hash of a rendered Deployment's spec, as written in
// AnnotationLastAppliedHash. encoding/json writes map keys sorted, so equal
// specs hash alike.
func specHash(spec *appsv1.DeploymentSpec) (string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing a Deployment spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}
