// Command kvhint is kvhint with copy-audit linked in.
package main

import (
	"fmt"
	"os"

	"github.com/kvrouter/kv-hint-operator/cmd/kvhint/app"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"

	copyaudit "example.com/copy-audit"
)

func main() {
	cat := builtin.NewCatalog()
	if err := copyaudit.Register(cat); err != nil {
		fmt.Fprintln(os.Stderr, "kvhint:", err)
		os.Exit(2)
	}
	os.Exit(app.Main(cat, os.Args[1:]))
}
