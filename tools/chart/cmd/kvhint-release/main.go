// Command kvhint-release writes the release bundle: `make release
// VERSION=x.y.z` runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kvrouter/kv-hint-operator/tools/chart"
)

func main() {
	repo := flag.String("repo", "../..", "the repository's root")
	version := flag.String("version", "", "the release, x.y.z (images tagged vx.y.z)")
	out := flag.String("out", "../../dist", "where to write the bundle")
	flag.Parse()
	b, err := chart.Release(*repo, *version, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvhint-release:", err)
		os.Exit(1)
	}
	for _, f := range []string{b.Install, b.CRDs, b.Chart, b.Sums} {
		fmt.Println("wrote", f)
	}
	for _, s := range b.SortedSizes() {
		fmt.Println("CRD", s)
	}
}
