package router

import "github.com/kvrouter/kv-hint-operator/pkg/wellknown"

// Names shared with the operator and the worker pods (pkg/wellknown),
// under the sidecar's names.
const (
	ConfigMapKey                     = wellknown.HintsConfigKey
	RolesKey                         = wellknown.RolesKey
	AnnotationAppliedHash            = wellknown.AppliedHashAnnotation
	LabelRouter                      = wellknown.RouterLabel
	AnnotationCapabilities           = wellknown.CapabilitiesAnnotation
	AnnotationHintEndpoint           = wellknown.HintEndpointAnnotation
	AnnotationWorkerType             = wellknown.WorkerTypeAnnotation
	AnnotationSourceControlEndpoints = wellknown.SourceControlEndpointsAnnotation
)

// ConfigMapName is the name of router's compiled-config ConfigMap.
func ConfigMapName(router string) string { return wellknown.ConfigMapName(router) }
