package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/filecheck"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func newValidateCommand(cat *hints.Catalog) *cobra.Command {
	var files []string
	var output string
	var mode hintsconfig.RouterMode
	var catalogFile string
	var budget *declared.Budget
	var form hintsconfig.Form
	var tgt hintsconfig.Target
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

Any other file is a hints YAML, a Dynamo router policy file: exactly one
YAML document, read as Dynamo's router reads it (unknown keys refused at
every level, worker_selection: {} refused), with every role under
--router-mode (default kv; Dynamo's router takes the same flag). Root keys
Dynamo reads that kvhint does not check (policy_classes, models,
uncached_isl_buckets, default_policy_family, request_classifier) are kept
and reported as NotChecked warnings. A second document, a role key that
YAML 1.1 reads as something else than written (yes, no, on, off: quote
them), .nan or .inf are errors.

A hints YAML is read in the policy-file form of --policy-file-form, else of
the --catalog declaration, else of the file: PerRoleHints (each role a
{type, parameters, hints} mapping or a bare type, as Dynamo's developer
documentation writes it) or RouterWideHint (as a released Dynamo Frontend
reads it: each role names an entry of worker_selection.instances or
default, and one root kv_hint_policy runs on every role on the KV path, or
no hint policy runs). A file with a root kv_hint_policy is RouterWideHint.

--target names the program that reads the file. sidecar (the default for a
hints YAML) is the kvhint sidecar, which reads both forms. dynamo is a
released Dynamo Frontend: the file is read and written in RouterWideHint,
and the per-role form only when the --catalog declaration says the build
reads it (policyFileForm: PerRoleHints); --policy-file-form PerRoleHints
with --target dynamo and no such declaration is a usage error. In
manifests, --target dynamo writes every router whose declared catalog
states no form in RouterWideHint; without --target each router has its own:
a restart-mode workload (an opted-in Deployment or DynamoGraphDeployment)
runs a Dynamo Frontend (RouterWideHint), any other router the sidecar
(PerRoleHints). Off the KV path a role is written as default in
RouterWideHint, as its router mode picks the worker.

Every problem is printed as FILE:LINE: LOCATION: Reason: message (":LINE" left
out where the place has no line); the Reason is the one the object's Accepted
or ResolvedRefs condition would carry. --output json prints one JSON document
instead: {"valid", "files", "problems": [{"file", "line", "object",
"location", "type", "key", "reason", "message", "severity"}]}.

--catalog FILE checks against a declared catalog (kind PolicyCatalog) instead
of the policy types linked into kvhint: the types a router's own build links
(Dynamo's Rust crates), each with its parameters schema, commitments and
default hosts. The rules and their reasons are the same. A declaration that
cannot be used is printed as FILE:LINE: PATH: InvalidCatalog: message and
exits 2.

Exit status: 0 when valid (warnings are printed), 1 when any file breaks a
rule, 2 on a usage or read error. "-" reads standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("no input: give one or more -f FILE")
			}
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: use text or json", output)
			}
			cat, declaredForm, err := withCatalog(cat, catalogFile, budget, "", cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			form, routersForm, err := filecheck.TargetForms(tgt, form, declaredForm)
			if err != nil {
				return err
			}
			return validateFiles(cat, files, output, mode, filecheck.FileRead{Form: form, Target: tgt, Declared: catalogFile != ""}, routersForm, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "hints YAML or manifest file to check (repeatable; - for stdin)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, or json for pipeline tools")
	cmd.Flags().Var(routerModeFlag{&mode}, "router-mode", "the router's mode for every role of a hints YAML file: "+hintsconfig.RouterModeList()+" (manifests carry spec.routerMode)")
	budget = addCatalogFlag(cmd, &catalogFile)
	cmd.Flags().Var(formFlag{&form}, "policy-file-form", formFlagHelp)
	cmd.Flags().Var(targetFlag{&tgt}, "target", targetFlagHelp)
	return cmd
}

func validateFiles(cat *hints.Catalog, files []string, output string, mode hintsconfig.RouterMode, form filecheck.FileRead, routersForm hintsconfig.Form, stdin io.Reader, stdout, stderr io.Writer) error {
	files, err := filecheck.ExpandInputs(files)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{code: ExitUsage}
	}
	res := filecheck.Validate(cat, files, modesOf(mode), form, routersForm, stdin)
	code := ExitOK
	if res.Invalid {
		code = ExitInvalid
	}
	if res.Unreadable {
		code = ExitUsage
	}
	if output == "json" {
		if err := filecheck.WriteReport(stdout, filecheck.Report{Valid: code == ExitOK, Files: files, Problems: res.Problems}); err != nil {
			fmt.Fprintln(stderr, err)
			return exitError{code: ExitUsage}
		}
	} else {
		for _, p := range res.Problems {
			if p.Reason == filecheck.ReasonReadError {
				fmt.Fprintf(stderr, "%s: %s\n", p.File, p.Message)
			} else {
				fmt.Fprintln(stdout, p.Text())
			}
		}
		if code == ExitOK {
			fmt.Fprintf(stdout, "%d file(s) valid\n", len(files))
		}
	}
	if code != ExitOK {
		return exitError{code: code}
	}
	return nil
}
