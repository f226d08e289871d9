package declared

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// APIVersion and Kind identify a declaration document.
const (
	APIVersion = "hints.kvrouter.io/v1alpha1"
	Kind       = "PolicyCatalog"
)

// Commitment names as a declaration writes them: pkg/hints's names, or
// the names of Dynamo's Rust API (Commitments::KV_COPY), so that a
// declaration can be written from either.
const (
	CommitmentKVCopy     = "KVCopy"
	commitmentKVCopyRust = "KV_COPY"
)

// AnyHost is the default host that stands for every worker selection
// (hints.AnyWorkerSelection, Dynamo's AnyWorkerSelection).
const AnyHost = "*"

// Limits of a declaration, so that a ConfigMap someone else wrote cannot
// make the manager compile without end.
const (
	// MaxTypes caps the hint types and the worker-selection types, each.
	MaxTypes = 128
	// MaxDocumentBytes caps the declaration's text: a ConfigMap holds at
	// most 1 MiB anyway.
	MaxDocumentBytes = 1 << 20
)

// Document is a declaration, as written.
type Document struct {
	// APIVersion is hints.kvrouter.io/v1alpha1.
	APIVersion string `json:"apiVersion"`
	// Kind is PolicyCatalog.
	Kind string `json:"kind"`
	// Metadata names the declaration, for messages; optional.
	Metadata Metadata `json:"metadata,omitempty"`
	// PolicyFileForm is the shape of policy file the router's build reads
	// (hintsconfig.Form): PerRoleHints, where each role lists its own hint
	// policies (Dynamo's developer documentation), or RouterWideHint,
	// where roles name worker_selection.instances and one root
	// kv_hint_policy runs for the whole router (a released Dynamo
	// Frontend). The manager and kvhint compile write the router's file
	// in it, and refuse roles it cannot carry. Empty, the declaration
	// states no form and the router's target decides
	// (rolegraph.RouterForm): RouterWideHint for a restart-mode router (a
	// Dynamo Frontend), PerRoleHints for a sidecar router; a hints file
	// given to kvhint on its own is read in its own form.
	PolicyFileForm hintsconfig.Form `json:"policyFileForm,omitempty"`
	// DynamoVersion is the Dynamo version the router's Frontend runs,
	// such as "1.7" or "1.7.0": it picks the dialect of the router's
	// roles (which presets its Frontend has) over what the router's
	// workload says (a DynamoGraphDeployment component's runtimeVersion,
	// the Frontend image's tag), and under a RouterRole's own
	// hints.kvrouter.io/dynamo-version annotation. Empty: the declaration
	// does not say.
	DynamoVersion string `json:"dynamoVersion,omitempty"`
	// WorkerSelections are the worker-selection types the router links,
	// in the order listings show them.
	WorkerSelections []Selection `json:"workerSelections,omitempty"`
	// Hints are the hint policy types the router links, in the order
	// their defaults run.
	Hints []Hint `json:"hints,omitempty"`
}

// Metadata is the declaration's name.
type Metadata struct {
	Name string `json:"name,omitempty"`
}

// Selection declares one worker-selection type.
type Selection struct {
	// Type is the name roles use (hints.CheckTypeName): Dynamo's own
	// spelling, such as harness_prefetch.
	Type string `json:"type"`
	// Description is one line for listings.
	Description string `json:"description,omitempty"`
	// Parameters is the schema of the type's parameters, an OpenAPI v3
	// object schema as a CRD writes one. Absent: the type takes no
	// parameters, and any key is refused.
	Parameters *apiextensionsv1.JSONSchemaProps `json:"parameters,omitempty"`
	// CommitsKVCopies is a CEL expression over params, the parameters
	// with the schema's defaults applied, that is true when the policy so
	// parameterised commits KV copies, such as
	// "params.shared_cache_multiplier > 0". Absent: never.
	CommitsKVCopies string `json:"commitsKVCopies,omitempty"`
}

// Hint declares one hint policy type.
type Hint struct {
	// Type is the name roles use (hints.CheckTypeName): Dynamo's own
	// spelling, such as harness_prefetch.
	Type string `json:"type"`
	// Description is one line for listings.
	Description string `json:"description,omitempty"`
	// Commitments lists the selection decisions the policy consumes:
	// KVCopy (or KV_COPY) for a policy that sends the committed KV copy.
	Commitments []string `json:"commitments,omitempty"`
	// DefaultHosts names the worker-selection types the policy runs under
	// when a role does not list its hints, or "*" for every one.
	DefaultHosts []string `json:"defaultHosts,omitempty"`
	// Parameters is the schema of the policy's parameters (see
	// Selection.Parameters).
	Parameters *apiextensionsv1.JSONSchemaProps `json:"parameters,omitempty"`
}
