// Package v1alpha1 holds the kv-hint-operator API: RouterRole, which says
// what one router runs for one role, and HintPolicy, a reusable hint policy
// instance that RouterRoles reference.
//
// +kubebuilder:object:generate=true
// +groupName=hints.kvrouter.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of this package.
	GroupVersion = schema.GroupVersion{Group: "hints.kvrouter.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package in a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
