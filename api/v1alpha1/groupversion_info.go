// Package v1alpha1 holds the kv-hint-operator API: RouterRole, which says
// what one router runs for one role, and HintPolicy, a reusable hint policy
// instance that RouterRoles reference.
//
// +kubebuilder:object:generate=true
// +groupName=hints.kvrouter.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of this package.
	GroupVersion = schema.GroupVersion{Group: "hints.kvrouter.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package in a scheme. It is
	// apimachinery's, as in k8s.io/api, so that importing the types needs
	// no controller-runtime (whose scheme.Builder is deprecated for that).
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &RouterRole{}, &RouterRoleList{}, &HintPolicy{}, &HintPolicyList{}, &RouterRollout{}, &RouterRolloutList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
