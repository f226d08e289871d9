package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/filecheck"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// catalogFlagHelp is the help of --catalog, on every command that takes it.
const catalogFlagHelp = "a PolicyCatalog declaration (YAML) of the router's own policy types, checked against instead of the types linked into kvhint: for a router whose build links policies kvhint does not (Dynamo's Rust crates)"

// addCatalogFlag registers --catalog and the flags of its budget; the
// budget returned holds their values once the flags are parsed.
func addCatalogFlag(cmd *cobra.Command, file *string) *declared.Budget {
	cmd.Flags().StringVar(file, "catalog", "", catalogFlagHelp)
	b := declared.DefaultBudget()
	b.AddFlags(cmd.Flags())
	return &b
}

// withCatalog returns the catalog a command checks against: linked, or the
// declaration in file when one is given. A declaration that cannot be used
// is printed, each problem as FILE:LINE: PATH: message, and is a usage
// error (exit 2): nothing was checked. So is one over budget.
//
// The form is the policy-file form a hints YAML file given on its own is
// read and written in: form when the flag set it, else the declaration's
// policyFileForm, else empty (read from the file; written as read).
func withCatalog(linked *hints.Catalog, file string, budget *declared.Budget, form hintsconfig.Form, stdin io.Reader, stderr io.Writer) (*hints.Catalog, hintsconfig.Form, error) {
	if file == "" {
		return linked, form, nil
	}
	data, err := filecheck.ReadInput(file, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "--catalog %s: %v\n", file, err)
		return nil, "", exitError{code: ExitUsage}
	}
	cat, err := budget.Load(data)
	if derr, ok := errors.AsType[*declared.Error](err); ok {
		for _, p := range derr.Problems {
			fmt.Fprintln(stderr, filecheck.DeclarationProblem(file, p))
		}
		return nil, "", exitError{code: ExitUsage}
	}
	if err != nil {
		fmt.Fprintf(stderr, "--catalog %s: %v\n", file, err)
		return nil, "", exitError{code: ExitUsage}
	}
	if form == "" {
		form = cat.Form
	}
	return cat.Catalog, form, nil
}

// formFlagHelp is the help of --policy-file-form.
const formFlagHelp = "the policy-file form of a hints YAML file given on its own: PerRoleHints (each role lists its hints) or RouterWideHint " +
	"(roles name worker_selection.instances, one root kv_hint_policy, as a released Dynamo Frontend reads); default: the --catalog " +
	"declaration's policyFileForm, else read from the file (a root kv_hint_policy is RouterWideHint). Manifests take the form from the router's declared catalog"

// formFlag is --policy-file-form; an unknown form is a usage error.
type formFlag struct{ form *hintsconfig.Form }

func (f formFlag) String() string {
	if f.form == nil {
		return ""
	}
	return string(*f.form)
}

func (f formFlag) Set(s string) error {
	form := hintsconfig.Form(s)
	if s == "" || !form.Valid() {
		return fmt.Errorf("%q is not a policy-file form; use %s or %s", s, hintsconfig.FormPerRoleHints, hintsconfig.FormRouterWideHint)
	}
	*f.form = form
	return nil
}

func (formFlag) Type() string { return "form" }
