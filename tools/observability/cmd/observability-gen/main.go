// Command observability-gen writes kv-hint-operator's generated
// monitoring files (the PrometheusRule, the Grafana dashboard and its
// ConfigMap) from their sources. Run it from tools/observability, or pass
// the repository's root:
//
//	go run ./cmd/observability-gen [-root ../..]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kvrouter/kv-hint-operator/tools/observability"
)

func main() {
	root := flag.String("root", "../..", "the repository's root")
	flag.Parse()
	paths, err := observability.Write(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "observability-gen:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println("wrote", p)
	}
}
