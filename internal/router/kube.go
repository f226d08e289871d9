package router

// Names shared with the operator. They mirror the constants the operator's
// api/v1alpha1 package exports; the values must stay equal.
const (
	// ConfigMapSuffix: the operator writes router R's compiled config to the
	// ConfigMap R + ConfigMapSuffix.
	ConfigMapSuffix = "-hints"
	// ConfigMapKey is the data key of the compiled hints YAML.
	ConfigMapKey = "hints.yaml"
	// AnnotationAppliedHash is written by the sidecar on its own Pod: the
	// hash of the config it runs.
	AnnotationAppliedHash = "hints.kvrouter.io/applied-hash"
	// LabelRouter marks a router's pods with the router's name.
	LabelRouter = "hints.kvrouter.io/router"
	// AnnotationCapabilities lists a worker pod's capabilities, comma
	// separated; router_hint to receive hints.
	AnnotationCapabilities = "hints.kvrouter.io/capabilities"
	// AnnotationHintEndpoint is a worker pod's hint endpoint: an absolute
	// http(s) URL, or ":PORT/PATH" on the pod's own IP.
	AnnotationHintEndpoint = "hints.kvrouter.io/hint-endpoint"
	// AnnotationWorkerType is a worker pod's router_hint_worker_type
	// (aggregated, prefill or decode); informational.
	AnnotationWorkerType = "hints.kvrouter.io/worker-type"
)

// ConfigMapName is the name of router's compiled-config ConfigMap.
func ConfigMapName(router string) string { return router + ConfigMapSuffix }
