package router

import "github.com/kvrouter/kv-hint-operator/api/v1alpha1"

// Names shared with the operator. The first group is the operator's
// contract in api/v1alpha1, repeated here under the sidecar's names; the
// worker annotations are read only by the sidecar.
const (
	// ConfigMapKey is the data key of the compiled hints YAML.
	ConfigMapKey = v1alpha1.HintsConfigKey
	// AnnotationAppliedHash is written by the sidecar on its own Pod: the
	// hash of the config it runs (hintsconfig.ContentHash of the hints.yaml
	// bytes, the value of the ConfigMap's hints.kvrouter.io/hash).
	AnnotationAppliedHash = v1alpha1.AppliedHashAnnotation
	// LabelRouter marks a router's pods with the router's name.
	LabelRouter = v1alpha1.RouterLabel

	// AnnotationCapabilities lists a worker pod's capabilities, comma
	// separated; router_hint to receive hints.
	AnnotationCapabilities = "hints.kvrouter.io/capabilities"
	// AnnotationHintEndpoint is a worker pod's hint endpoint: ":PORT/PATH"
	// on the pod's own IP, or, only when the sidecar runs with
	// --allow-absolute-hint-endpoints, an absolute http(s) URL.
	AnnotationHintEndpoint = "hints.kvrouter.io/hint-endpoint"
	// AnnotationWorkerType is a worker pod's router_hint_worker_type
	// (aggregated, prefill or decode); a pod with another value is not
	// registered (logged and counted in workers_refused_total).
	AnnotationWorkerType = "hints.kvrouter.io/worker-type"
	// AnnotationSourceControlEndpoints is a worker pod's
	// router_hint_source_control_endpoints (rank to endpoint, JSON).
	AnnotationSourceControlEndpoints = v1alpha1.SourceControlEndpointsAnnotation
	// WorkerSelectorsKey is the ConfigMap data key of the roles' worker
	// selectors.
	WorkerSelectorsKey = v1alpha1.WorkerSelectorsKey
)

// ConfigMapName is the name of router's compiled-config ConfigMap.
func ConfigMapName(router string) string { return v1alpha1.HintsConfigMapName(router) }
