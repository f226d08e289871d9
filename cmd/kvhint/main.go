// Command kvhint is kv-hint-operator's one binary: the operator, the router
// sidecar, the offline checks and the local development environment.
//
// A build with custom plugins is this file with one more import: register
// the plugin's providers in the catalog before calling app.Main (see
// examples/kv-offload).
package main

import (
	"os"

	"github.com/kvrouter/kv-hint-operator/cmd/kvhint/app"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

func main() {
	os.Exit(app.Main(builtin.NewCatalog(), os.Args[1:]))
}
