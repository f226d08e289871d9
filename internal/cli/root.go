// Package cli holds the product's subcommands: manager, sidecar, validate,
// compile and preview. Main is the entry point every kvhint build shares, the
// standard one and custom ones with more plugins. The development
// subcommands (dev, loadgen, sim-worker) are in internal/dev/devcli, so that
// kvhint links neither envtest nor the simulators.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitInvalid = 1 // the input breaks a rule
	ExitUsage   = 2 // bad flags, unreadable files
)

// exitError carries an exit code out of a subcommand; its message, if any,
// has been printed already.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Exit returns the error a subcommand returns to make Execute exit with
// code after printing its own message.
func Exit(code int) error { return exitError{code: code} }

// Main runs kvhint with the policies linked in cat and returns the exit code.
func Main(cat *hints.Catalog, args []string) int {
	return run(cat, args, os.Stdout, os.Stderr)
}

func run(cat *hints.Catalog, args []string, stdout, stderr io.Writer) int {
	return Execute(NewRootCommand(cat), args, stdout, stderr)
}

// Execute runs a command tree (NewRootCommand's, or one with more
// subcommands) on args and returns the exit code.
func Execute(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	var ee exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintln(stderr, root.Name()+":", err)
		return ExitUsage
	}
}

// NewRootCommand returns the kvhint command tree for a catalog.
func NewRootCommand(cat *hints.Catalog) *cobra.Command {
	root := &cobra.Command{
		Use:           "kvhint",
		Short:         "Configure and run KV hint policies for LLM-serving routers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newValidateCommand(cat),
		newCompileCommand(cat),
		newManagerCommand(cat),
		newSidecarCommand(cat),
		newCatalogCommand(cat),
		newPreviewCommand(cat),
		newVersionCommand(),
	)
	return root
}
