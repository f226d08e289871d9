// Command kvhint is kv-hint-operator's one binary: the operator, the router
// sidecar, the offline checks and the local development environment.
//
// A build with custom plugins is this file with one more import: register
// the plugin's providers in the catalog before calling cli.Main (see
// examples/).
package main

import (
	"os"

	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/internal/hints/builtin"
)

func main() {
	os.Exit(cli.Main(builtin.NewCatalog(), os.Args[1:]))
}
