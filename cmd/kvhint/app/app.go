// Package app is kvhint's entry point, public so that a team can build its
// own kvhint with its plugins linked in: a main package that registers the
// plugins' providers in a catalog and hands it to Main.
//
//	func main() {
//		cat := builtin.NewCatalog()
//		if err := myplugin.Register(cat); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(2)
//		}
//		os.Exit(app.Main(cat, os.Args[1:]))
//	}
//
// Every subcommand of that build (manager, sidecar, validate, compile)
// then knows the plugins' types, so the operator and the sidecar can never
// disagree on what a type means. Experimental until v1: see CHANGELOG.md.
package app

import (
	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Main runs the kvhint command line (args without the program name) with
// the policy types of cat, and returns the process exit code: 0 on success,
// 1 when a check found problems, 2 on a usage or runtime error.
func Main(cat *hints.Catalog, args []string) int { return cli.Main(cat, args) }
