// Command kvhint is kvhint with the kv-offload policy linked in: the whole
// of a custom build. Build this image instead of the stock one, and every
// subcommand (manager, sidecar, validate, compile, dev) knows kv-offload.
package main

import (
	"fmt"
	"os"

	"github.com/kvrouter/kv-hint-operator/cmd/kvhint/app"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"

	kvoffload "example.com/kv-offload"
)

func main() {
	cat := builtin.NewCatalog()
	if err := kvoffload.Register(cat); err != nil {
		fmt.Fprintln(os.Stderr, "kvhint:", err)
		os.Exit(2)
	}
	os.Exit(app.Main(cat, os.Args[1:]))
}
