package filecheck

import (
	"io"
	"strings"

	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Reasons of the problems only Validate reports.
const (
	// ReasonNoRoles: a hints YAML with no role (instances or profiles
	// alone); a warning.
	ReasonNoRoles = "NoRoles"
	// ReasonNoObjects: manifests with no RouterRole or HintPolicy; a
	// warning.
	ReasonNoObjects = "NoObjects"
	// ReasonReadError: a file that could not be read.
	ReasonReadError = "ReadError"
)

// Result is what Validate found.
type Result struct {
	// Problems are every problem, hints YAML files in the order given,
	// then the manifests'.
	Problems []Problem
	// Invalid says a file breaks a rule.
	Invalid bool
	// Unreadable says a file could not be read (a ReasonReadError
	// problem).
	Unreadable bool
}

// Validate checks files (directories expanded, "-" for stdin): each
// hints YAML file on its own, read as read says with its roles under
// modes, and the manifests together, namespace by namespace, as the
// manager compiles them (see NewManifestSet for routersForm, read.Target
// and read.Declared).
func Validate(cat *hints.Catalog, files []string, modes hintsconfig.Modes, read FileRead, routersForm hintsconfig.Form, stdin io.Reader) Result {
	var res Result
	manifests := NewManifestSet(routersForm, read.Target, read.Declared)
	for _, name := range files {
		data, err := ReadInput(name, stdin)
		if err != nil {
			res.Problems = append(res.Problems, Problem{File: name, Reason: ReasonReadError, Message: err.Error(), Severity: SeverityError})
			res.Unreadable = true
			continue
		}
		if rolegraph.IsManifest(data) {
			manifests.Add(name, data)
			continue
		}
		g, ps := CompileHintsYAML(cat, data, modes, read)
		for _, p := range ps {
			res.Problems = append(res.Problems, HintsProblem(name, p))
		}
		if ps.HasErrors() {
			res.Invalid = true
		} else if len(g.Roles) == 0 {
			res.Problems = append(res.Problems, Problem{File: name, Reason: ReasonNoRoles, Severity: SeverityWarning, Where: "config",
				Message: "the file holds no role: a router running it runs no hints"})
		}
	}
	if len(manifests.Files()) > 0 {
		manifests.Compile(cat)
		res.Problems = append(res.Problems, manifests.All()...)
		res.Invalid = res.Invalid || manifests.Failed()
		if manifests.Objects() == 0 {
			res.Problems = append(res.Problems, Problem{File: strings.Join(manifests.Files(), ", "), Reason: ReasonNoObjects, Severity: SeverityWarning,
				Message: "the manifests hold no RouterRole and no HintPolicy; nothing was checked"})
		}
	}
	return res
}
