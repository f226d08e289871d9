package v1alpha1

// The names below are the contract between the manager, which writes the
// compiled hints config, and the router sidecar, which runs it and reports
// back. They never change within an API version.
const (
	// RouterLabel marks the pods of a router, and the ConfigMap compiled for
	// it, with the router's name (a RouterRole's spec.router). The manager
	// counts the pods that carry it when it sets Programmed.
	RouterLabel = "hints.kvrouter.io/router"

	// AppliedHashAnnotation is set by the sidecar on its own Pod to the
	// HashAnnotation value of the config it runs now.
	AppliedHashAnnotation = "hints.kvrouter.io/applied-hash"

	// SidecarFieldManager is the field manager the sidecar writes
	// AppliedHashAnnotation under. The manager counts the annotation only
	// while managedFields show that manager owns it, so a value written by
	// any other tool (kubectl annotate, another controller) is ignored.
	SidecarFieldManager = "kvhint-sidecar"

	// HashAnnotation on a compiled ConfigMap is the content hash of its
	// HintsConfigKey entry (hintsconfig.ContentHash: the first 16 hex digits of
	// the SHA-256 of the bytes).
	HashAnnotation = "hints.kvrouter.io/hash"

	// HintsConfigKey is the ConfigMap data key that holds the compiled hints
	// YAML, the format hintsconfig.ParseConfig reads.
	HintsConfigKey = "hints.yaml"

	// ManagedByLabel is the standard label the manager sets to ManagedBy on
	// the ConfigMaps it writes; it watches only ConfigMaps that carry both
	// it and RouterLabel.
	ManagedByLabel = "app.kubernetes.io/managed-by"

	// ManagedBy is the value of ManagedByLabel on compiled ConfigMaps.
	ManagedBy = "kvhint-manager"
)

// HintsConfigMapName returns the name of the ConfigMap compiled for a
// router: "<router>-hints", in the namespace of its RouterRoles.
func HintsConfigMapName(router string) string {
	return router + "-hints"
}
