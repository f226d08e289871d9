// Command kvhint-release builds a release of kv-hint-operator into a
// folder: the kvhint archives, the multi-arch image as an OCI layout with
// its SBOM, install.yaml, crds.yaml, the packaged chart, the stand-in
// router's image and router.yaml, and SHA256SUMS.
// `make release VERSION=vX.Y.Z` runs it; `make release-snapshot` runs it
// with -snapshot (no version needed, uncommitted changes allowed).
//
// `kvhint-release publish -layout FILE -repository REPO` pushes the image
// of a release's OCI layout (the index by tag, the SBOM as its referrer)
// with the local registry credentials; the release workflow runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvrouter/kv-hint-operator/tools/chart"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "publish" {
		publish(os.Args[2:])
		return
	}
	var o chart.Options
	flag.StringVar(&o.Repo, "repo", "../..", "the repository's root")
	flag.StringVar(&o.Version, "version", "", "the release, vX.Y.Z (the chart's version is X.Y.Z)")
	flag.StringVar(&o.Out, "out", "../../dist", "where to write the artifacts")
	flag.BoolVar(&o.Snapshot, "snapshot", false, "a snapshot: the version defaults to v0.0.0-snapshot-COMMIT and uncommitted changes are allowed")
	flag.Parse()
	b, err := chart.Release(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvhint-release:", err)
		os.Exit(1)
	}
	fmt.Printf("kvhint %s, commit %s, date %s\nimage %s\nstand-in router image %s\n", b.Version, b.Commit, b.Date, b.Image, b.StandInImage)
	for _, f := range append(b.Files(), b.Sums) {
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvhint-release:", err)
			os.Exit(1)
		}
		fmt.Printf("%10d  %s\n", st.Size(), filepath.Join(o.Out, filepath.Base(f)))
	}
	for _, s := range b.SortedSizes() {
		fmt.Println("CRD", s)
	}
}

func publish(args []string) {
	fs := flag.NewFlagSet("publish", flag.ExitOnError)
	layout := fs.String("layout", "", "the release's OCI layout tar (dist/kvhint_vX.Y.Z_image.oci.tar)")
	repository := fs.String("repository", chart.ImageRepository, "where to push the image")
	_ = fs.Parse(args)
	if *layout == "" {
		fmt.Fprintln(os.Stderr, "kvhint-release publish: -layout is required")
		os.Exit(2)
	}
	ref, err := chart.Publish(*layout, *repository)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvhint-release publish:", err)
		os.Exit(1)
	}
	fmt.Println("pushed", ref)
}
