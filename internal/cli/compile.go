package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func newCompileCommand(cat *hints.Catalog) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "compile -f FILE...",
		Short: "Print the compiled hints YAML: defaults expanded, parameters effective",
		Long: `Print the compiled hints YAML the operator would write: every role's hints
listed, defaults expanded and parameters effective, byte for byte the same
for the same input. Problems go to standard error; any error exits 1.

A file may also be a Kubernetes manifest of RouterRoles and HintPolicies (see
kvhint validate --help); all manifest files are compiled together, and the
config of each router is printed, as the manager would write it into the
ConfigMap "<router>-hints".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("no input: give one or more -f FILE")
			}
			return compileFiles(cat, files, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "hints YAML or manifest file to compile (repeatable; - for stdin)")
	return cmd
}

func compileFiles(cat *hints.Catalog, files []string, stdin io.Reader, stdout, stderr io.Writer) error {
	files, err := expandInputs(files)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{code: ExitUsage}
	}
	var docs [][]byte
	manifests := newManifestSet()
	for _, name := range files {
		data, err := readInput(name, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitError{code: ExitUsage}
		}
		if rolegraph.IsManifest(data) {
			manifests.add(name, data)
			continue
		}
		g, probs := compileHintsYAML(cat, data)
		printProblems(stderr, name, probs)
		if probs.HasErrors() {
			return exitError{code: ExitInvalid}
		}
		doc, hash, err := g.Encode()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitError{code: ExitInvalid}
		}
		docs = append(docs, append([]byte(fmt.Sprintf("# source: %s\n# hash: %s\n", name, hash)), doc...))
	}
	if len(manifests.files) > 0 {
		routers := manifests.compile(cat)
		manifests.print(stderr)
		if manifests.failed {
			return exitError{code: ExitInvalid}
		}
		for _, r := range routers {
			docs = append(docs, append([]byte(r.header()), r.router.Config...))
		}
	}
	for i, d := range docs {
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		stdout.Write(d)
	}
	return nil
}
