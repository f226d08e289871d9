// Command kvhint-dev is kvhint with its development tools: every subcommand
// of kvhint (manager, sidecar, validate, compile) plus dev (the whole
// product on a local control plane, `make dev`), loadgen (the load
// generator) and sim-worker (simulated workers). It is not shipped: the
// product binary, cmd/kvhint, links neither envtest nor the simulators.
package main

import (
	"os"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devcli"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

func main() {
	os.Exit(devcli.Main(builtin.NewCatalog(), os.Args[1:]))
}
