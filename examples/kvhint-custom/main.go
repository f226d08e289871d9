// Command kvhint-custom is kvhint with the kv-offload example policy linked
// in: the whole of a custom build.
package main

import (
	"fmt"
	"os"

	"github.com/kvrouter/kv-hint-operator/cmd/kvhint/app"
	"github.com/kvrouter/kv-hint-operator/examples/kvoffload"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

func main() {
	cat := builtin.NewCatalog()
	if err := kvoffload.Register(cat); err != nil {
		fmt.Fprintln(os.Stderr, "kvhint-custom:", err)
		os.Exit(2)
	}
	os.Exit(app.Main(cat, os.Args[1:]))
}
