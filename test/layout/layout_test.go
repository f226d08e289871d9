// Package layout checks the repository's map against the repository: the
// layout paragraph of docs/development.md names every Go package `go list
// ./...` lists, and every path it names exists.
package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

const module = "github.com/kvrouter/kv-hint-operator"

// wholeTrees are the folders the layout names as one: what lies below
// them (generated CRD data, the samples' embed, hack's tools) is not
// listed package by package.
var wholeTrees = []string{"config", "hack"}

// TestLayoutMatchesPackages: every package of the module is named in the
// layout (from "Layout: " to the next heading), by its path or by its name beside a folder above it
// (`internal/sidecar` ... `booking`), and every path the paragraph names
// is a folder of the repository.
func TestLayoutMatchesPackages(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(doc), "\nLayout: ")
	if !ok {
		t.Fatal(`docs/development.md has no section starting "Layout: "`)
	}
	para, _, _ = strings.Cut(para, "\n## ")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(para, -1) {
		named[m[1]] = true
	}

	list := exec.Command("go", "list", "./...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel != "" {
			pkgs = append(pkgs, rel)
		}
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list ./... listed %d packages: %q", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if !covered(p, named) {
			t.Errorf("package %s is not in docs/development.md's layout: name it (`%s`, or `%s` beside a folder above it)", p, p, filepath.Base(p))
		}
	}

	pathish := regexp.MustCompile(`^(api|cmd|config|controllers|examples|hack|internal|pkg|test|tools)(/[A-Za-z0-9_./-]*)?$`)
	for n := range named {
		if !pathish.MatchString(n) {
			continue
		}
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(n))); err != nil || !st.IsDir() {
			t.Errorf("docs/development.md's layout names %s, which is not a folder of the repository", n)
		}
	}
}

// covered says whether the layout names package p.
func covered(p string, named map[string]bool) bool {
	if named[p] || named[p+"/"] {
		return true
	}
	for a := filepath.Dir(p); a != "."; a = filepath.Dir(a) {
		if (named[a] || named[a+"/"]) && named[filepath.Base(p)] {
			return true
		}
		if slices.Contains(wholeTrees, a) && named[a+"/"] {
			return true
		}
	}
	return false
}
