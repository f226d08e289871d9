package mdlinks

import (
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"GitOps: Flux and Argo CD", "gitops-flux-and-argo-cd"},
		{"Run with Dynamo's router", "run-with-dynamos-router"},
		{"The sidecar (ServiceAccount `kvhint-sidecar-<router>`)", "the-sidecar-serviceaccount-kvhint-sidecar-router"},
		{"Who may set `applied-hash`, and what the manager trusts", "who-may-set-applied-hash-and-what-the-manager-trusts"},
		{"The manager (ServiceAccount `kvhint-system/kvhint-manager`)", "the-manager-serviceaccount-kvhint-systemkvhint-manager"},
		{"Manager: 1,000 RouterRoles across 100 routers", "manager-1000-routerroles-across-100-routers"},
		{"Verdict (at most 1 µs)", "verdict-at-most-1-µs"},
		{"[The router sidecar](sidecar.md) and <em>more</em>", "the-router-sidecar-and-more"},
		{"kv_hints  path", "kv_hints--path"},
		{"Slow policies: deadline, hard deadline and ejection", "slow-policies-deadline-hard-deadline-and-ejection"},
	} {
		if got := Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

const page = "# Title\n" +
	"\n" +
	"## Usage\n" +
	"\n" +
	"## Usage\n" +
	"\n" +
	"Setext heading\n" +
	"--------------\n" +
	"\n" +
	"<a id=\"custom-anchor\"></a>\n" +
	"A [link](other.md#part) and ![img](img/logo.png \"title\"), `[not](a-link.md)`.\n" +
	"A [link over\n" +
	"two lines](<with space.md>).\n" +
	"\n" +
	"```sh\n" +
	"# not a heading\n" +
	"echo [x](inside-code.md)\n" +
	"```\n" +
	"~~~~\n" +
	"```\n" +
	"[y](inside-tilde.md)\n" +
	"~~~~\n" +
	"\n" +
	"[ref]: refs/target.md#top\n" +
	"| a | [cell](table.md) |\n" +
	"<a href=\"html.md\">x</a> and [paren](dir/file_(1).md)\n"

func TestParse(t *testing.T) {
	d := Parse([]byte(page))
	var anchors []string
	for a := range d.Anchors {
		anchors = append(anchors, a)
	}
	sort.Strings(anchors)
	wantAnchors := []string{"custom-anchor", "setext-heading", "title", "usage", "usage-1"}
	if diff := cmp.Diff(wantAnchors, anchors); diff != "" {
		t.Errorf("anchors (-want +got):\n%s", diff)
	}
	wantLinks := []Link{
		{11, "other.md#part"}, {11, "img/logo.png"},
		{13, "with space.md"},
		{24, "refs/target.md#top"},
		{25, "table.md"},
		{26, "dir/file_(1).md"}, {26, "html.md"},
	}
	if diff := cmp.Diff(wantLinks, d.Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}

// tree is a repository of in-memory files.
func tree(files map[string]string) *Tree {
	var names []string
	for n := range files {
		names = append(names, n)
	}
	return NewTree(names, func(name string) ([]byte, error) {
		s, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("no file %s", name)
		}
		return []byte(s), nil
	})
}

func TestCheck(t *testing.T) {
	files := map[string]string{
		"README.md": "# Repo\n\n## Quick start\n\n" +
			"[ok](docs/a.md) [ok anchor](docs/a.md#second-part) [ok repeat](docs/a.md#part-1)\n" +
			"[ok local](#quick-start) [ok dir](docs/) [ok root](/docs/a.md) [ok code](hack/tool.sh#L3)\n" +
			"[external](https://example.com/x.md#nope) [mail](mailto:a@b) [ok escaped](docs/a%20b.md)\n" +
			"[broken file](docs/missing.md)\n" +
			"[broken anchor](docs/a.md#no-such-part)\n" +
			"[broken local](#quick-stop)\n" +
			"[outside](../elsewhere.md)\n" +
			"```\n[in code](docs/missing.md)\n```\n",
		"docs/a.md":    "# A\n\n## Part\n\n## Part\n\n## Second part\n\n[back](../README.md#quick-start) [bad back](../README.md#quickstart)\n",
		"docs/a b.md":  "# Spaced\n",
		"hack/tool.sh": "#!/bin/sh\n",
	}
	problems, err := tree(files).Check([]string{"README.md", "docs/a.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Problem{
		{"README.md", 8, "docs/missing.md", "no file or directory docs/missing.md"},
		{"README.md", 9, "docs/a.md#no-such-part", `no heading or id "no-such-part" in docs/a.md`},
		{"README.md", 10, "#quick-stop", `no heading or id "quick-stop" in README.md`},
		{"README.md", 11, "../elsewhere.md", "points outside the repository"},
		{"docs/a.md", 9, "../README.md#quickstart", `no heading or id "quickstart" in README.md`},
	}
	if diff := cmp.Diff(want, problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestCheckCleanTree(t *testing.T) {
	files := map[string]string{
		"README.md":     "# R\n\nSee [the guide](docs/guide.md#install).\n",
		"docs/guide.md": "# Guide\n\n## Install\n",
	}
	problems, err := tree(files).Check([]string{"README.md", "docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Errorf("want no problems, got %v", problems)
	}
}
