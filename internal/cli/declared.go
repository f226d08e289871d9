package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// catalogFlagHelp is the help of --catalog, on every command that takes it.
const catalogFlagHelp = "a PolicyCatalog declaration (YAML) of the router's own policy types, checked against instead of the types linked into kvhint: for a router whose build links policies kvhint does not (Dynamo's Rust crates)"

// addCatalogFlag registers --catalog and the flags of its budget; the
// budget returned holds their values once the flags are parsed.
func addCatalogFlag(cmd *cobra.Command, file *string) *declared.Budget {
	cmd.Flags().StringVar(file, "catalog", "", catalogFlagHelp)
	b := declared.DefaultBudget()
	addBudgetFlags(cmd.Flags(), &b)
	return &b
}

// withCatalog returns the catalog a command checks against: linked, or the
// declaration in file when one is given. A declaration that cannot be used
// is printed, each problem as FILE:LINE: PATH: message, and is a usage
// error (exit 2): nothing was checked. So is one over budget.
func withCatalog(linked *hints.Catalog, file string, budget *declared.Budget, stdin io.Reader, stderr io.Writer) (*hints.Catalog, error) {
	if file == "" {
		return linked, nil
	}
	data, err := readInput(file, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "--catalog %s: %v\n", file, err)
		return nil, exitError{code: ExitUsage}
	}
	cat, err := budget.Load(data)
	if derr, ok := errors.AsType[*declared.Error](err); ok {
		for _, p := range derr.Problems {
			fmt.Fprintln(stderr, declarationProblem(file, p))
		}
		return nil, exitError{code: ExitUsage}
	}
	if err != nil {
		fmt.Fprintf(stderr, "--catalog %s: %v\n", file, err)
		return nil, exitError{code: ExitUsage}
	}
	return cat.Catalog, nil
}

func declarationProblem(file string, p declared.Problem) string {
	where := file
	if p.Line > 0 {
		where = fmt.Sprintf("%s:%d", file, p.Line)
	}
	if p.Path != "" {
		where += ": " + p.Path
	}
	return fmt.Sprintf("%s: InvalidCatalog: %s", where, p.Message)
}
