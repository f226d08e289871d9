// Package v1beta1 holds, for the tests only, the part of Dynamo's
// DynamoGraphDeployment API (group nvidia.com, version v1beta1, Dynamo's
// storage version) that kv-hint-operator reads and writes: the graph's
// components with their pod templates, and the status Dynamo's operator
// reports. The field names, JSON names and validations follow Dynamo's
// public v1beta1 schema (ai-dynamo/dynamo,
// deploy/operator/api/v1beta1); fields the product never touches are left
// out. controller-gen turns these types into the CRD in test/dynamo/crd,
// which the tests install in their API server in place of Dynamo's.
//
// Nothing in the product binary imports this package: the manager reads
// DynamoGraphDeployments as unstructured objects, so that it runs on a
// cluster whose Dynamo release has more fields than these.
//
// +kubebuilder:object:generate=true
// +groupName=nvidia.com
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is Dynamo's API group and the version of this package.
	GroupVersion = schema.GroupVersion{Group: "nvidia.com", Version: "v1beta1"}

	// SchemeBuilder registers the types of this package in a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &DynamoGraphDeployment{}, &DynamoGraphDeploymentList{},
		&DynamoComponentDeployment{}, &DynamoComponentDeploymentList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
