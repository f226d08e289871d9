package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/filecheck"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func newCompileCommand(cat *hints.Catalog) *cobra.Command {
	var files []string
	var router string
	var mode hintsconfig.RouterMode
	var catalogFile string
	var budget *declared.Budget
	var form hintsconfig.Form
	var tgt hintsconfig.Target
	cmd := &cobra.Command{
		Use:   "compile -f FILE...",
		Short: "Print the compiled hints YAML: defaults expanded, parameters effective",
		Long: `Print the compiled hints YAML the operator would write: every role's hints
listed, defaults expanded and parameters effective, byte for byte the same
for the same input. Problems go to standard error; any error exits 1.

A file may also be a Kubernetes manifest of RouterRoles and HintPolicies (see
kvhint validate --help); all manifest files are compiled together, and the
config of each router is printed exactly as the manager writes it into the
key hints.yaml of the ConfigMap "<router>-hints": no header, the same bytes,
beside its roles.yaml (each role's router mode and worker pool), which
standard error shows with the ConfigMap's hints.kvrouter.io/hash (over both
keys). A router with no accepted role prints nothing: its ConfigMap holds
no hints.yaml, since Dynamo's router refuses a file with no role. Several
configs are separated by "---" lines; which router (or file) each one is,
and its hash, is written to standard error. --router NAME prints one
router's alone.

A hints YAML file is compiled with every role under --router-mode (default
kv), as Dynamo's router runs it, and written in its policy-file form
(--policy-file-form, else the --catalog declaration's, else the file's; see
kvhint validate --help). A router of manifests is written in the form its
declared catalog's policyFileForm names, else its target's (--target, else
the router's own: RouterWideHint for a restart-mode workload's Dynamo
Frontend, PerRoleHints for the sidecar; see kvhint validate --help): in
RouterWideHint, each role an instance named after it (default off the KV
path) and one kv_hint_policy for the router, and roles on the KV path that
do not all run one and the same single hint policy are refused
(PolicyFormCannotCarry) and nothing of the router is written. --catalog FILE compiles against a
declared catalog (see kvhint validate --help).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("no input: give one or more -f FILE")
			}
			cat, declaredForm, err := withCatalog(cat, catalogFile, budget, "", cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			form, routersForm, err := filecheck.TargetForms(tgt, form, declaredForm)
			if err != nil {
				return err
			}
			return compileFiles(cat, files, router, mode, filecheck.FileRead{Form: form, Target: tgt, Declared: catalogFile != ""}, routersForm, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "hints YAML or manifest file to compile (repeatable; - for stdin)")
	cmd.Flags().StringVar(&router, "router", "", "print only the config of this router (manifests)")
	cmd.Flags().Var(routerModeFlag{&mode}, "router-mode", "the router's mode for every role of a hints YAML file: "+hintsconfig.RouterModeList())
	budget = addCatalogFlag(cmd, &catalogFile)
	cmd.Flags().Var(formFlag{&form}, "policy-file-form", formFlagHelp)
	cmd.Flags().Var(targetFlag{&tgt}, "target", targetFlagHelp)
	return cmd
}

func compileFiles(cat *hints.Catalog, files []string, router string, mode hintsconfig.RouterMode, form filecheck.FileRead, routersForm hintsconfig.Form, stdin io.Reader, stdout, stderr io.Writer) error {
	configs, err := loadCompiled(cat, files, router, mode, form, routersForm, stdin, stderr)
	if err != nil {
		return err
	}
	var docs [][]byte
	var notes []string
	for _, c := range configs {
		notes = append(notes, c.Note)
		if c.Doc != nil {
			docs = append(docs, c.Doc)
		}
	}
	for i, d := range docs {
		if len(docs) > 1 {
			notes[i] = fmt.Sprintf("# document %d: %s", i+1, strings.TrimPrefix(notes[i], "# "))
		}
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		stdout.Write(d)
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, n)
	}
	return nil
}

// loadCompiled reads the -f inputs as filecheck.Load does, with the
// roles of a hints YAML file under --router-mode, and turns its refusals
// into exit codes: ExitInvalid for an input that breaks a rule,
// ExitUsage for an unreadable one or a bad --router.
func loadCompiled(cat *hints.Catalog, files []string, router string, mode hintsconfig.RouterMode, form filecheck.FileRead, routersForm hintsconfig.Form, stdin io.Reader, stderr io.Writer) ([]filecheck.Config, error) {
	configs, err := filecheck.Load(cat, files, router, modesOf(mode), form, routersForm, stdin, stderr)
	switch {
	case errors.Is(err, filecheck.ErrInvalid):
		return nil, exitError{code: ExitInvalid}
	case err != nil:
		return nil, exitError{code: ExitUsage}
	}
	return configs, nil
}
