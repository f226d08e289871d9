// Package wellknown holds the names that the manager, the router sidecar,
// worker pods and routers agree on: labels, annotations, ConfigMap keys,
// the field manager of the sidecar's report, and the reasons of the hints
// config rules. It imports nothing, so every side can read them without
// importing the API types; api/v1alpha1 repeats them for users of the API.
// They never change within an API version.
package wellknown

const (
	// RouterLabel marks the pods of a router, and the ConfigMap compiled for
	// it, with the router's name (a RouterRole's spec.router). The manager
	// counts the pods that carry it when it sets Programmed.
	RouterLabel = "hints.kvrouter.io/router"

	// AppliedHashAnnotation is set by the sidecar on its own Pod to the
	// HashAnnotation value of the config it runs now.
	AppliedHashAnnotation = "hints.kvrouter.io/applied-hash"

	// EjectedPoliciesAnnotation is set by the sidecar on its own Pod while
	// it has hint policies out of their roles' paths (ejected for
	// overrunning, see the router sidecar's --policy-* flags), and removed
	// when none is: a comma-separated list of ROLE/POLICY=REASON, sorted,
	// of at most MaxEjectedPoliciesReported entries, then ",+N" for N more.
	// ROLE and POLICY (the instance name, else the type) are DNS labels;
	// REASON is overrun, abandoned or busy. The manager reports the
	// ejected policies in each RouterRole's status from it.
	EjectedPoliciesAnnotation = "hints.kvrouter.io/ejected-policies"

	// MaxEjectedPoliciesReported bounds the entries of
	// EjectedPoliciesAnnotation.
	MaxEjectedPoliciesReported = 16

	// SidecarFieldManager is the field manager the sidecar writes
	// AppliedHashAnnotation under. The manager counts the annotation only
	// while managedFields show that manager owns it, so a value written by
	// any other tool (kubectl annotate, another controller) is ignored.
	SidecarFieldManager = "kvhint-sidecar"

	// HashAnnotation on a compiled ConfigMap is the content hash of its
	// data: HintsConfigKey and RolesKey together (the first 16 hex digits
	// of a SHA-256 over both), so a change of a role's mode or worker pool
	// moves it as a change of the policy file does.
	HashAnnotation = "hints.kvrouter.io/hash"

	// HintsConfigKey is the ConfigMap data key that holds the compiled hints
	// YAML: a Dynamo router policy file, the format hintsconfig.ParseConfig
	// reads and Dynamo's router takes from --router-policy-config. It is
	// absent while no role of the router is accepted, since Dynamo's
	// router refuses a file with no role.
	HintsConfigKey = "hints.yaml"

	// RolesKey is the ConfigMap data key, next to HintsConfigKey, that
	// holds each role's settings that are not part of the policy file: its
	// router mode (routerMode; Dynamo takes it from --router-mode) and its
	// worker pool (workerSelector, a metav1.LabelSelector). The sidecar
	// runs each role under its mode and sends a role's hints only to its
	// pool.
	RolesKey = "roles.yaml"

	// SourceControlEndpointsAnnotation on a worker pod is its
	// router_hint_source_control_endpoints: a JSON object from
	// data-parallel rank to KV control endpoint, such as
	// {"0": "tcp://10.0.0.7:23280"}. An endpoint written "tcp://:PORT"
	// is on the pod's own IP. Bookings may then name only the source
	// worker (and rank) of a committed copy.
	SourceControlEndpointsAnnotation = "hints.kvrouter.io/source-control-endpoints"

	// ManagedByLabel is the standard label the manager sets to ManagedBy on
	// the ConfigMaps it writes; it watches only ConfigMaps that carry both
	// it and RouterLabel.
	ManagedByLabel = "app.kubernetes.io/managed-by"

	// ManagedBy is the value of ManagedByLabel on compiled ConfigMaps.
	ManagedBy = "kvhint-manager"
)

// Worker pod annotations: how a worker advertises itself to the sidecars
// of the routers that book it, mirroring Dynamo's runtime keys.
const (
	// CapabilitiesAnnotation lists a worker pod's capabilities, comma
	// separated; router_hint to receive hints.
	CapabilitiesAnnotation = "hints.kvrouter.io/capabilities"
	// HintEndpointAnnotation is a worker pod's hint endpoint: ":PORT/PATH"
	// on the pod's own IP, or, only when the sidecar runs with
	// --allow-absolute-hint-endpoints, an absolute http(s) URL.
	HintEndpointAnnotation = "hints.kvrouter.io/hint-endpoint"
	// WorkerTypeAnnotation is a worker pod's router_hint_worker_type
	// (aggregated, prefill or decode); a pod with another value is not
	// registered.
	WorkerTypeAnnotation = "hints.kvrouter.io/worker-type"
	// TopologyDomainsAnnotation is a worker pod's topology_domains: a JSON
	// object from a topology domain's name to the pod's value in it, such
	// as {"zone": "us-east-1a", "rack": "rack-22"}. The labels Dynamo's
	// operator copies onto a worker pod from its node
	// (nvidia.com/dynamo-topology.<domain>) are read too; this annotation
	// wins for a domain both name.
	TopologyDomainsAnnotation = "hints.kvrouter.io/topology-domains"
	// KVTransferDomainAnnotation is a worker pod's kv_transfer_domain:
	// the name of the topology domain (such as zone) its KV transfers stay
	// within, one the pod publishes a value in.
	KVTransferDomainAnnotation = "hints.kvrouter.io/kv-transfer-domain"
	// KVTransferEnforcementAnnotation is a worker pod's
	// kv_transfer_enforcement: required (the default where a domain is
	// set, as Dynamo's workers publish it: the pod fetches only from
	// sources with its value in the domain) or preferred.
	KVTransferEnforcementAnnotation = "hints.kvrouter.io/kv-transfer-enforcement"
	// KVTransferPreferredWeightAnnotation is a worker pod's
	// kv_transfer_preferred_weight: under preferred enforcement, which
	// requires it, the preference's weight in [0, 1].
	KVTransferPreferredWeightAnnotation = "hints.kvrouter.io/kv-transfer-preferred-weight"
)

// ConfigMapName returns the name of the ConfigMap compiled for a
// router: "<router>-hints", in the namespace of its RouterRoles.
func ConfigMapName(router string) string {
	return router + "-hints"
}

// Manual control of a RouterRollout: one-shot annotations on it whose value
// is the hash of the candidate they act on, so that they cannot act on
// another candidate. The manager removes each once it has acted on it.
const (
	// PromoteAnnotation promotes the candidate now, skipping the steps
	// left.
	PromoteAnnotation = "hints.kvrouter.io/promote"
	// AbortAnnotation rolls the candidate back now (reason Aborted).
	AbortAnnotation = "hints.kvrouter.io/abort"
	// ResumeAnnotation continues a rollout paused by an Inconclusive
	// analysis.
	ResumeAnnotation = "hints.kvrouter.io/resume"
)
