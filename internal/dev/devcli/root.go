// Package devcli is kvhint-dev: the product's subcommands (internal/cli)
// plus those for development only: dev (the whole product on a local
// control plane), loadgen (the load generator) and sim-worker (simulated
// workers). It may import internal/dev/devenv, internal/dev/loadgen and
// internal/dev/simworker, and with them controller-runtime's envtest; the
// product binary, kvhint, links none of them.
//
// kvhint-dev is a superset of kvhint so that `kvhint-dev dev` can run its
// manager, sidecars and workers as child processes of the one binary.
package devcli

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Main runs kvhint-dev with the policies linked in cat and returns the exit
// code, as cli.Main does for kvhint.
func Main(cat *hints.Catalog, args []string) int {
	return run(cat, args, os.Stdout, os.Stderr)
}

func run(cat *hints.Catalog, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(NewRootCommand(cat), args, stdout, stderr)
}

// NewRootCommand returns kvhint's command tree with the development
// subcommands added.
func NewRootCommand(cat *hints.Catalog) *cobra.Command {
	root := cli.NewRootCommand(cat)
	root.Use = "kvhint-dev"
	root.Short = "kvhint plus its development tools: a local environment, a load generator, simulated workers"
	root.AddCommand(
		newDevCommand(),
		newLoadgenCommand(),
		newSimWorkerCommand(),
		newRouterCommand(),
		newSynthTraceCommand(),
		newChainSessionsCommand(),
	)
	return root
}
