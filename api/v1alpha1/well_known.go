package v1alpha1

import "github.com/kvrouter/kv-hint-operator/pkg/wellknown"

// The names below are the contract between the manager, which writes the
// compiled hints config, and the router sidecar, which runs it and reports
// back; pkg/wellknown documents each. They are repeated here for users of
// the API types, and never change within an API version.
const (
	RouterLabel                      = wellknown.RouterLabel
	AppliedHashAnnotation            = wellknown.AppliedHashAnnotation
	EjectedPoliciesAnnotation        = wellknown.EjectedPoliciesAnnotation
	SidecarFieldManager              = wellknown.SidecarFieldManager
	HashAnnotation                   = wellknown.HashAnnotation
	HintsConfigKey                   = wellknown.HintsConfigKey
	RolesKey                         = wellknown.RolesKey
	SourceControlEndpointsAnnotation = wellknown.SourceControlEndpointsAnnotation
	ManagedByLabel                   = wellknown.ManagedByLabel
	ManagedBy                        = wellknown.ManagedBy
)

// HintsConfigMapName returns the name of the ConfigMap compiled for a
// router: "<router>-hints", in the namespace of its RouterRoles.
func HintsConfigMapName(router string) string { return wellknown.ConfigMapName(router) }
