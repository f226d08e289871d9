package cli

import (
	"fmt"
	"io"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func newValidateCommand(cat *hints.Catalog) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "validate -f FILE...",
		Short: "Check hints YAML files or RouterRole/HintPolicy manifests with the router's start-up rules",
		Long: `Check hints YAML files, or Kubernetes manifests holding RouterRoles and
HintPolicies, with the same rules the operator and the sidecar apply.

A file whose first document has a kind or an apiVersion is a manifest; it may
hold many documents (and Lists), and objects of other kinds are skipped, so a
kustomize build can be checked as it is. All manifest files are checked
together, namespace by namespace, the way the manager compiles them once
applied: a policyRef resolves to a HintPolicy in any of the files. The API
server's own schema checks (enums, name patterns, CEL rules) are not run;
their rules are checked again as the compile step knows them.

Every problem is printed as FILE: LOCATION: Reason: message; the Reason is the
one the object's Accepted or ResolvedRefs condition would carry. Exit status: 0
when valid (warnings are printed), 1 when any file breaks a rule, 2 on a usage
or read error. "-" reads standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("no input: give one or more -f FILE")
			}
			return validateFiles(cat, files, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "hints YAML or manifest file to check (repeatable; - for stdin)")
	return cmd
}

func validateFiles(cat *hints.Catalog, files []string, stdin io.Reader, stdout, stderr io.Writer) error {
	files, err := expandInputs(files)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{code: ExitUsage}
	}
	code := ExitOK
	manifests := newManifestSet()
	for _, name := range files {
		data, err := readInput(name, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			code = max(code, ExitUsage)
			continue
		}
		if rolegraph.IsManifest(data) {
			manifests.add(name, data)
			continue
		}
		_, probs := compileHintsYAML(cat, data)
		printProblems(stdout, name, probs)
		if probs.HasErrors() {
			code = max(code, ExitInvalid)
		}
	}
	if len(manifests.files) > 0 {
		manifests.compile(cat)
		manifests.print(stdout)
		if manifests.failed {
			code = max(code, ExitInvalid)
		}
	}
	if code == ExitOK {
		fmt.Fprintf(stdout, "%d file(s) valid\n", len(files))
		return nil
	}
	return exitError{code: code}
}

// compileHintsYAML parses and compiles one hints YAML document.
func compileHintsYAML(cat *hints.Catalog, data []byte) (*hintsconfig.Graph, hintsconfig.Problems) {
	cfg, err := hintsconfig.ParseConfig(data)
	if err != nil {
		if probs, ok := err.(hintsconfig.Problems); ok {
			return nil, probs
		}
		return nil, hintsconfig.Problems{{Severity: hintsconfig.SeverityError, Reason: hintsconfig.ReasonInvalidConfig, Hint: hintsconfig.NoHint, Message: err.Error()}}
	}
	return hintsconfig.Compile(cat, cfg)
}

func printProblems(w io.Writer, file string, probs hintsconfig.Problems) {
	for _, p := range probs {
		if p.Severity == hintsconfig.SeverityWarning {
			fmt.Fprintf(w, "%s: %s: %s (warning): %s\n", file, p.Location(), p.Reason, p.Message)
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", file, p.Error())
	}
}
