package filecheck

import (
	"cmp"
	"fmt"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TargetForms combines --target with --policy-file-form (flag) and the
// form the --catalog declaration states (declared), either empty when not
// given. It returns the form a hints YAML file given on its own is read
// and written in (empty: the file's own), and the form the routers of
// manifests are written in when no declared catalog of theirs states one
// (empty: each router's target decides, see rolegraph.RouterForm).
//
// --policy-file-form is the lower-level knob, and wins where it does not
// contradict the target: under --target dynamo the per-role form is
// written only for a build whose declared catalog says it reads it, so
// --policy-file-form PerRoleHints without such a declaration is refused
// rather than writing a file a released Frontend refuses to start with.
func TargetForms(t hintsconfig.Target, flag, declared hintsconfig.Form) (file, manifests hintsconfig.Form, err error) {
	if t != hintsconfig.TargetDynamo {
		return cmp.Or(flag, declared), "", nil
	}
	if flag == hintsconfig.FormPerRoleHints && declared != hintsconfig.FormPerRoleHints {
		return "", "", fmt.Errorf("--target %s with --policy-file-form %s: a released Dynamo Frontend reads only the %s form "+
			"(worker_selection.<role> is \"invalid type: map, expected a string\" to it); a Dynamo build that reads per-role hints "+
			"says so in its declared catalog (--catalog FILE with policyFileForm: %s), or use --target %s",
			hintsconfig.TargetDynamo, hintsconfig.FormPerRoleHints, hintsconfig.FormRouterWideHint, hintsconfig.FormPerRoleHints, hintsconfig.TargetSidecar)
	}
	return cmp.Or(flag, declared, hintsconfig.FormRouterWideHint), hintsconfig.FormRouterWideHint, nil
}

// FileRead is how a hints YAML file given on its own is read: in Form
// (empty: the file's own), by Target, against a declared catalog
// (Declared) or a stock build.
type FileRead struct {
	Form     hintsconfig.Form
	Target   hintsconfig.Target
	Declared bool
}

// CompileHintsYAML parses one hints YAML document as read says (its
// policy-file form, empty: the file's own; for a Dynamo Frontend, Dynamo's
// parse and start-up rules) and compiles it with the roles under modes.
func CompileHintsYAML(cat *hints.Catalog, data []byte, modes hintsconfig.Modes, read FileRead) (*hintsconfig.Graph, hintsconfig.Problems) {
	var cfg *hintsconfig.Config
	var err error
	if read.Target == hintsconfig.TargetDynamo && read.Form == hintsconfig.FormRouterWideHint {
		cfg, err = hintsconfig.ParseConfigFor(data, hintsconfig.TargetDynamo)
		if cfg != nil {
			cfg.DeclaredCatalog = read.Declared
		}
	} else {
		cfg, err = hintsconfig.ParseConfigForm(data, read.Form)
	}
	if err != nil {
		if probs, ok := err.(hintsconfig.Problems); ok {
			return nil, probs
		}
		return nil, hintsconfig.Problems{{Severity: hintsconfig.SeverityError, Reason: hintsconfig.ReasonInvalidConfig, Hint: hintsconfig.NoHint, Message: err.Error()}}
	}
	return hintsconfig.Compile(cat, cfg, modes)
}

// DeclarationProblem renders a problem of a --catalog declaration as
// FILE:LINE: PATH: InvalidCatalog: message.
func DeclarationProblem(file string, p declared.Problem) string {
	where := file
	if p.Line > 0 {
		where = fmt.Sprintf("%s:%d", file, p.Line)
	}
	if p.Path != "" {
		where += ": " + p.Path
	}
	return fmt.Sprintf("%s: InvalidCatalog: %s", where, p.Message)
}
