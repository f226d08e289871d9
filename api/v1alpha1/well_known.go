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
	PromoteAnnotation                = wellknown.PromoteAnnotation
	AbortAnnotation                  = wellknown.AbortAnnotation
	ResumeAnnotation                 = wellknown.ResumeAnnotation
)

// HintsConfigMapName returns the name of the ConfigMap compiled for a
// router: "<router>-hints", in the namespace of its RouterRoles.
func HintsConfigMapName(router string) string { return wellknown.ConfigMapName(router) }

// Restart-mode routers: a router workload that reads its policy file only
// at start-up (Dynamo's own router) opts in to having the manager roll it.
const (
	// RouterContainerAnnotation, on a Deployment that also carries
	// RouterLabel, opts it in to restart mode and names the container that
	// runs the router. The manager then writes each compiled config as an
	// immutable ConfigMap named by its hash (RevisionConfigMapName) and
	// adds three entries of its own to the pod template, by server-side
	// apply as RolloutFieldManager: volume PolicyVolumeName on that
	// ConfigMap, a read-only mount of it at PolicyMountPath on the router
	// container, and env RouterPolicyConfigEnv naming PolicyFilePath.
	// Nothing else of the Deployment is written, and nothing at all of a
	// Deployment without the opt-in; the Deployment's rolling update
	// replaces the pods.
	RouterContainerAnnotation = "hints.kvrouter.io/router-container"

	// DynamoVersionAnnotation, on a RouterRole, names the Dynamo version
	// its router's Frontend runs ("1.6", "1.7.0"), over what the router's
	// workload says (a DynamoGraphDeployment component's runtimeVersion,
	// else the router container's image tag); 1.6 where nothing says. The
	// version picks the dialect: which presets the Frontend has.
	DynamoVersionAnnotation = "hints.kvrouter.io/dynamo-version"

	// PolicyVolumeAnnotation is the earlier opt-in: it named a volume of
	// the owner's manifest whose configMap.name the manager repointed. It
	// still opts a Deployment in, its router container being the first
	// that mounts that volume, and the manager adds its three entries as
	// for RouterContainerAnnotation; the named volume is no longer
	// written (docs/dynamo.md, "Migrating from policy-volume").
	PolicyVolumeAnnotation = "hints.kvrouter.io/policy-volume"

	// PolicyVolumeName is the pod template volume the manager adds to an
	// opted-in workload: a configMap volume on the current revision.
	PolicyVolumeName = "kvhint-policy"
	// PolicyMountPath is where the manager mounts PolicyVolumeName,
	// read-only, in the router container.
	PolicyMountPath = "/etc/kvhint/policy"
	// PolicyFilePath is the policy file the router reads:
	// PolicyMountPath/HintsConfigKey.
	PolicyFilePath = PolicyMountPath + "/" + HintsConfigKey
	// RouterPolicyConfigEnv is the environment variable the manager sets
	// on the router container to PolicyFilePath; Dynamo's router reads
	// its policy file from it unless --router-policy-config is given.
	RouterPolicyConfigEnv = "DYN_ROUTER_POLICY_CONFIG"

	// ConfigHashLabel is on every immutable ConfigMap the manager writes
	// for a restart-mode router: the content hash it holds. The mutable
	// "<router>-hints" ConfigMap does not carry it.
	ConfigHashLabel = "hints.kvrouter.io/config-hash"

	// RolloutFieldManager is the field manager of the manager's writes to
	// a router workload: the three entries above and nothing else. (The
	// earlier "kvhint-manager-rollout", which repointed a volume of the
	// owner's manifest, is left as it is on Deployments it wrote.)
	RolloutFieldManager = "kvhint-manager-policy"

	// RouterComponentAnnotation, on a DynamoGraphDeployment
	// (nvidia.com/v1beta1) that also carries RouterLabel, opts it in to
	// restart mode. Its value names the component that runs the router;
	// empty, the component is found by type: the one of type epp, else
	// the one of type frontend, else the one with a frontendSidecar. The
	// manager adds the same three entries as for a Deployment to that
	// component's podTemplate on the DGD itself, by server-side apply as
	// RolloutFieldManager (on container "main", or the frontendSidecar's
	// container); Dynamo's operator renders them into the pods. Nothing
	// else of the DGD is written, and nothing of a DGD without the opt-in.
	RouterComponentAnnotation = "hints.kvrouter.io/router-component"

	// HeldAnnotation is on an opted-in router Deployment while a
	// RouterRollout runs its candidate on one pod. The manager sets it
	// when it holds the Deployment at one surge pod (spec.strategy
	// RollingUpdate with maxSurge 1 and maxUnavailable 0, spec.minReadySeconds
	// just under the progress deadline, then spec.paused) and removes it
	// when it puts the owner's values back. Its value is JSON: the stable
	// config hash, and the Deployment's own strategy and minReadySeconds
	// (null when unset), for example
	// {"stable":"0f1e2d3c4b5a6978","strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}},"minReadySeconds":null}.
	HeldAnnotation = "hints.kvrouter.io/held"
)

// GraphOptedIn reports whether a DynamoGraphDeployment's annotations opt
// it in to restart mode (RouterComponentAnnotation).
func GraphOptedIn(annotations map[string]string) bool {
	_, ok := annotations[RouterComponentAnnotation]
	return ok
}

// OptedIn reports whether a router workload's annotations opt it in to
// restart mode (RouterContainerAnnotation, or the earlier
// PolicyVolumeAnnotation).
func OptedIn(annotations map[string]string) bool {
	_, c := annotations[RouterContainerAnnotation]
	_, v := annotations[PolicyVolumeAnnotation]
	return c || v
}

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
