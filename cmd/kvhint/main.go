// Command kvhint is kv-hint-operator's product binary: the operator
// (manager), the router sidecar and the offline checks (validate, compile).
// The development tools (dev, loadgen, sim-worker) are cmd/kvhint-dev's.
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
