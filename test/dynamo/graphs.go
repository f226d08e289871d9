package dynamo

import (
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// CRDDir is the folder of the DynamoGraphDeployment CRD, relative to the
// repository's root.
const CRDDir = "test/dynamo/crd"

// CRDPath is the folder of the DynamoGraphDeployment CRD under the
// repository root repoRoot, for envtest's CRDDirectoryPaths (from a test in
// test/rollout, CRDPath("../..")).
func CRDPath(repoRoot string) string {
	return filepath.Join(repoRoot, filepath.FromSlash(CRDDir))
}

// Images of the builders' containers. Nothing pulls them: the tests' pods
// run on kwok's fake nodes, or on no node at all.
const (
	FrontendImage = "dynamo-frontend:test"
	WorkerImage   = "dynamo-worker:test"
)

// Component names of FrontendGraph.
const (
	FrontendComponent = "frontend"
	WorkerComponent   = "worker"
)

// FrontendGraph returns an aggregated graph as Dynamo's examples deploy it
// with the KV router: a frontend component "frontend" with replicas pods,
// whose main container runs image FrontendImage with DYN_ROUTER_MODE=kv,
// and one worker "worker" (WorkerImage, vllm). It is on the Deployment
// path (nvidia.com/enable-grove: "false"). The caller may change anything
// before creating it; OnNode puts its pods on a node.
func FrontendGraph(ns, name string, replicas int32) *v1beta1.DynamoGraphDeployment {
	one := int32(1)
	return &v1beta1.DynamoGraphDeployment{
		TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "DynamoGraphDeployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   ns,
			Annotations: map[string]string{AnnotationEnableGrove: "false"},
		},
		Spec: v1beta1.DynamoGraphDeploymentSpec{
			BackendFramework: "vllm",
			Components: []v1beta1.DynamoComponentDeploymentSharedSpec{
				{
					ComponentName: FrontendComponent,
					ComponentType: v1beta1.ComponentTypeFrontend,
					Replicas:      &replicas,
					PodTemplate:   mainContainer(FrontendImage, corev1.EnvVar{Name: "DYN_ROUTER_MODE", Value: "kv"}),
				},
				{
					ComponentName: WorkerComponent,
					ComponentType: v1beta1.ComponentTypeWorker,
					Replicas:      &one,
					PodTemplate:   mainContainer(WorkerImage),
				},
			},
		},
	}
}

// EPPGraph returns a graph of the Gateway API topology: an endpoint picker
// component "epp" (type epp, replicas pods, image FrontendImage) beside a
// worker "worker".
func EPPGraph(ns, name string, replicas int32) *v1beta1.DynamoGraphDeployment {
	g := FrontendGraph(ns, name, replicas)
	g.Spec.Components[0].ComponentName = "epp"
	g.Spec.Components[0].ComponentType = v1beta1.ComponentTypeEPP
	return g
}

// OnNode sets spec.nodeName of every component's pod template: with no
// scheduler running, that is how a test puts pods on kwok's fake node.
func OnNode(dgd *v1beta1.DynamoGraphDeployment, node string) *v1beta1.DynamoGraphDeployment {
	for i := range dgd.Spec.Components {
		c := &dgd.Spec.Components[i]
		if c.PodTemplate == nil {
			c.PodTemplate = &corev1.PodTemplateSpec{}
		}
		c.PodTemplate.Spec.NodeName = node
	}
	return dgd
}

// mainContainer is a pod template with one container, "main".
func mainContainer(image string, env ...corev1.EnvVar) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: v1beta1.MainContainerName, Image: image, Env: env}},
		},
	}
}
