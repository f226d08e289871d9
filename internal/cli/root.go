// Package cli holds kvhint's subcommands. Main is the entry point every
// kvhint build shares, the standard one and custom ones with more plugins.
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

// Main runs kvhint with the policies linked in cat and returns the exit code.
func Main(cat *hints.Catalog, args []string) int {
	return run(cat, args, os.Stdout, os.Stderr)
}

func run(cat *hints.Catalog, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(cat)
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
		fmt.Fprintln(stderr, "kvhint:", err)
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
		newLoadgenCommand(),
		newDevCommand(),
		newSidecarCommand(cat),
		newSimWorkerCommand(),
	)
	return root
}
