package rolegraph

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Dialect is what one Dynamo release line's Frontend does differently
// with the same policy file and flags. Everything that differs between
// the dialects the manager knows is in Dialects, and nowhere else.
type Dialect struct {
	// Version is the release line, "1.6" or "1.7".
	Version string
	// CatalogCrate is the Rust crate of the stock worker-selection
	// catalog the Frontend links, for messages.
	CatalogCrate string
	// Presets are the Frontend's router presets: settings that replace
	// the cost-function parameters roles set.
	Presets []Preset
}

// Preset is a Frontend flag (or its variable) that sets the router's
// cost-function parameters itself, taking precedence over the individual
// settings.
type Preset struct {
	// Flag is the boolean flag, Env the variable that sets the same.
	Flag, Env string
	// Overrides says, for messages, what the preset sets.
	Overrides string
}

// DefaultDialect is the dialect where nothing says which Dynamo runs.
const DefaultDialect = "1.6"

// Dialects are the Dynamo release lines the manager knows, oldest first.
//
// Sources (December 2026): Dynamo 1.7 (GA 2026-11-23) release docs and
// docs.rs dynamo-llm 1.7.0. The stock catalog crate is
// dynamo_router_policies in 1.7 (with_defaults(registry), "adding Dynamo's
// default and any routing mode it lacks"), dynamo_custom_policy_builtin in
// 1.6; the full list of 1.7 type names is not confirmed, so both dialects
// link the same stock types here. 1.7's presets --load-aware
// (DYN_ROUTER_LOAD_AWARE) and --agentic (DYN_ROUTER_AGENTIC) imply
// --router-mode kv, exclude each other and "take precedence over the
// corresponding individual CLI options and environment variables"; 1.6
// has neither.
var Dialects = []Dialect{{
	Version:      "1.6",
	CatalogCrate: "dynamo_custom_policy_builtin",
}, {
	Version:      "1.7",
	CatalogCrate: "dynamo_router_policies",
	Presets: []Preset{
		{Flag: "--agentic", Env: "DYN_ROUTER_AGENTIC", Overrides: "overlap_score_credit 2, prefill_load_scale 4, decode_active_request_weight 64"},
		{Flag: "--load-aware", Env: "DYN_ROUTER_LOAD_AWARE", Overrides: "overlap_score_credit 0, no KV events"},
	},
}}

// dialect returns the dialect of a version string: the newest release
// line not newer than its major.minor ("1.7.0", "v1.7", "1.8.1" -> 1.7;
// "1.5.2" -> 1.6, the oldest known), and false when s does not start
// with a major.minor version.
func dialect(s string) (Dialect, bool) {
	major, minor, ok := majorMinor(s)
	if !ok {
		return Dialect{}, false
	}
	out := Dialects[0]
	for _, d := range Dialects {
		dm, dn, _ := majorMinor(d.Version)
		if major > dm || major == dm && minor >= dn {
			out = d
		}
	}
	return out, true
}

func majorMinor(s string) (major, minor int, ok bool) {
	return dynamograph.ParseVersion(s)
}

// imageTag returns the tag of a container image reference, "" when it
// has none (or only a digest).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[i+1:]
	}
	return ""
}

// DialectOf picks the dialect a role is compiled in, first to last: the
// role's annotation v1alpha1.DynamoVersionAnnotation; declared, the
// dynamoVersion its router's declared catalog states (declared.Catalog,
// checked when it was loaded); what its router's workload says (a
// DynamoGraphDeployment component's runtimeVersion, else the router
// container's image tag); else DefaultDialect. from says where it came
// from, for messages; err is a bad annotation value.
func DialectOf(annotations map[string]string, declared string, wl *Workload) (d Dialect, from string, err error) {
	if v, ok := annotations[v1alpha1.DynamoVersionAnnotation]; ok {
		d, ok := dialect(v)
		if !ok {
			return Dialect{}, "", fmt.Errorf("annotation %s is %q: want a Dynamo version such as 1.6 or 1.7.0", v1alpha1.DynamoVersionAnnotation, v)
		}
		return d, fmt.Sprintf("annotation %s %s", v1alpha1.DynamoVersionAnnotation, v), nil
	}
	if declared != "" {
		if d, ok := dialect(declared); ok {
			return d, "the declared catalog's dynamoVersion " + declared, nil
		}
	}
	if wl != nil && wl.version != "" {
		if d, ok := dialect(wl.version); ok {
			return d, wl.versionFrom, nil
		}
	}
	d, _ = dialect(DefaultDialect)
	return d, "the default (nothing names the Dynamo version)", nil
}

// presetsSet returns the presets of every dialect that container c (env
// merged) sets, each as "--agentic of <where>": the flag present in its
// command or args, or the variable set to a true value.
func presetsSet(where string, c *corev1.Container) map[string]string {
	out := map[string]string{}
	var words []string
	for _, s := range append(append([]string{}, c.Command...), c.Args...) {
		words = append(words, strings.Fields(s)...)
	}
	for _, d := range Dialects {
		for _, p := range d.Presets {
			for _, w := range words {
				if w == p.Flag || strings.HasPrefix(w, p.Flag+"=") && w != p.Flag+"=false" {
					out[p.Flag] = p.Flag + " of " + where
				}
			}
			for _, e := range c.Env {
				if e.Name == p.Env && e.ValueFrom == nil {
					if on, err := strconv.ParseBool(e.Value); err == nil && on {
						out[p.Flag] = p.Env + " of " + where
					}
				}
			}
		}
	}
	return out
}

// presetFindings warns, for a role on the KV path whose worker selection
// is Dynamo's default cost function, of every preset of the role's
// dialect its router's Frontend sets: the role's cost-function
// parameters are not what the router runs.
func presetFindings(rr *v1alpha1.RouterRole, declared string, r *hintsconfig.Role, wl *Workload) Findings {
	if wl == nil || len(wl.presets) == 0 || r == nil || r.Mode != hintsconfig.ModeKV || r.Selection.Type != hintsconfig.BuiltinSelectionType {
		return nil
	}
	d, from, err := DialectOf(rr.Annotations, declared, wl)
	if err != nil {
		return nil
	}
	var out Findings
	for _, p := range d.Presets {
		set, ok := wl.presets[p.Flag]
		if !ok {
			continue
		}
		out = append(out, Finding{
			Severity: hintsconfig.SeverityWarning, Condition: v1alpha1.ConditionAccepted, Reason: v1alpha1.ReasonPresetOverridesParameters,
			Field: "spec.workerSelection.parameters", Detail: r.Selection.Type,
			Message: fmt.Sprintf("%s: a Dynamo %s router preset (Dynamo %s from %s), which takes precedence over the cost-function parameters: "+
				"the router runs %s, not this role's values for them; remove the preset to run the role's parameters",
				set, d.Version, d.Version, from, p.Overrides),
		})
	}
	return out
}
