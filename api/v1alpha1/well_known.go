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

// Restart-mode routers: a router workload that reads its policy file only
// at start-up (Dynamo's own router) opts in to having the manager roll it.
const (
	// PolicyVolumeAnnotation, on a Deployment that also carries
	// RouterLabel, names the volume of its pod template that holds the
	// policy file. With it the manager writes each compiled config as an
	// immutable ConfigMap named by its hash (RevisionConfigMapName) and
	// sets that volume's configMap.name to it, and nothing else of the
	// Deployment; the Deployment's rolling update replaces the pods.
	// Without it the manager never writes the Deployment.
	PolicyVolumeAnnotation = "hints.kvrouter.io/policy-volume"

	// ConfigHashLabel is on every immutable ConfigMap the manager writes
	// for a restart-mode router: the content hash it holds. The mutable
	// "<router>-hints" ConfigMap does not carry it.
	ConfigHashLabel = "hints.kvrouter.io/config-hash"

	// RolloutFieldManager is the field manager of the manager's writes to
	// a router workload: only the policy volume's configMap.name.
	RolloutFieldManager = "kvhint-manager-rollout"
)

// RevisionConfigMapName returns the name of the immutable ConfigMap that
// holds one compiled config of a restart-mode router:
// "<router>-hints-<hash>".
func RevisionConfigMapName(router, hash string) string {
	return HintsConfigMapName(router) + "-" + hash
}

// A router whose build links policies kvhint cannot link (Dynamo's router
// links Rust crates) declares them in a ConfigMap of its namespace,
// labelled CatalogForLabel with the router's name, under the key
// CatalogKey: a PolicyCatalog (internal/declared). The manager and
// `kvhint validate -f` compile the router's RouterRoles against it instead
// of the linked catalog.
const (
	CatalogForLabel = "hints.kvrouter.io/catalog-for"
	CatalogKey      = "catalog.yaml"
)
