// Command docgen writes the generated references under docs/reference/:
//
//	docgen cli -out DIR          kvhint's commands (cobra's doc generator), one page each
//	docgen conditions -out FILE  condition types and reasons, from the doc comments of api/v1alpha1
//	docgen metrics -out FILE     the metrics of the sidecar's and the manager's registries
//
// make reference runs all three; make verify runs them into a temporary
// folder and fails if the committed pages differ.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: docgen cli|conditions|metrics -out PATH [-root DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	out := fs.String("out", "", "where to write (a folder for cli, a file otherwise)")
	root := fs.String("root", "../..", "the repository's root")
	_ = fs.Parse(os.Args[2:])
	if *out == "" {
		fmt.Fprintln(os.Stderr, "docgen: -out is required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "cli":
		err = writeCLI(*out)
	case "conditions":
		err = writeConditions(*root, *out)
	case "metrics":
		err = writeMetrics(*out)
	default:
		err = fmt.Errorf("unknown reference %q: want cli, conditions or metrics", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "docgen "+os.Args[1]+":", err)
		os.Exit(1)
	}
}
