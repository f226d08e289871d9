package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func newCatalogCommand(cat *hints.Catalog) *cobra.Command {
	var catalogFile string
	var budget *declared.Budget
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List the worker-selection and hint policy types linked into this binary",
		Long: `List the policy types this kvhint build links, in catalog order: the
worker-selection policies, then the hint policies with what they consume
(commitments) and the worker-selection policies they run under when a role
does not list its hints (default hosts; * is every selection, - none).
--catalog FILE lists a declared catalog instead, once it is checked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, _, err := withCatalog(cat, catalogFile, budget, "", cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeCatalog(cmd.OutOrStdout(), cat)
		},
	}
	budget = addCatalogFlag(cmd, &catalogFile)
	return cmd
}

func writeCatalog(w io.Writer, cat *hints.Catalog) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER SELECTION\tDESCRIPTION")
	for _, p := range cat.SelectionProviders() {
		fmt.Fprintf(tw, "%s\t%s\n", p.Type, p.Description)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HINT\tCOMMITMENTS\tDEFAULT HOSTS\tDESCRIPTION")
	for _, p := range cat.HintProviders() {
		hosts := make([]string, 0, len(p.DefaultHosts))
		for _, h := range p.DefaultHosts {
			hosts = append(hosts, h.String())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Type, orDash(p.Commitments.String()), orDash(strings.Join(hosts, ",")), p.Description)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
