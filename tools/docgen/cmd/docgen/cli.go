package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// writeCLI writes one Markdown page per command of kvhint (the standard
// build: the built-in policies) into dir, with cobra's doc generator, and
// removes the pages of commands that are gone.
func writeCLI(dir string) error {
	root := cli.NewRootCommand(builtin.NewCatalog())
	root.DisableAutoGenTag = true
	walk(root, func(c *cobra.Command) { c.DisableAutoGenTag = true })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "kvhint*.md"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("cobra's doc generator: %w", err)
	}
	return nil
}

func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, s := range c.Commands() {
		walk(s, f)
	}
}
