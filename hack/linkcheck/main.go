// Command linkcheck fails when a relative link or #anchor in a Markdown
// file of the repository does not resolve (make verify runs it). It checks
// the files git tracks or would track (git ls-files -co --exclude-standard),
// from the repository's root.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kvrouter/kv-hint-operator/internal/dev/mdlinks"
)

func main() {
	out, err := exec.Command("git", "ls-files", "-z", "-co", "--exclude-standard").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkcheck: git ls-files:", err)
		os.Exit(2)
	}
	var files, md []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			continue // deleted in the work tree
		}
		files = append(files, f)
		if strings.EqualFold(filepath.Ext(f), ".md") {
			md = append(md, f)
		}
	}
	tree := mdlinks.NewTree(files, func(name string) ([]byte, error) { return os.ReadFile(filepath.FromSlash(name)) })
	problems, err := tree.Check(md)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkcheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "linkcheck: %d broken links in %d Markdown files\n", len(problems), len(md))
		os.Exit(1)
	}
	fmt.Printf("linkcheck: every relative link and anchor of %d Markdown files resolves\n", len(md))
}
