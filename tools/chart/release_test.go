package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The snapshot release the tests share: built once per test binary, in
// a folder TestMain removes.
var (
	snapOnce sync.Once
	snapDir  string
	snapB    *Bundle
	snapErr  error
	snapTook time.Duration
)

// snapshotVersion is the version the tests' snapshot is stamped with.
const snapshotVersion = "v0.1.0"

func TestMain(m *testing.M) {
	code := m.Run()
	if snapDir != "" {
		_ = os.RemoveAll(snapDir)
	}
	os.Exit(code)
}

// snapshot runs the release in snapshot mode (uncommitted changes allowed,
// nothing published) as CI does, once.
func snapshot(t *testing.T) *Bundle {
	t.Helper()
	snapOnce.Do(func() {
		if snapDir, snapErr = os.MkdirTemp("", "kvhint-release-test-"); snapErr != nil {
			return
		}
		start := time.Now()
		snapB, snapErr = Release(Options{Repo: repo, Out: filepath.Join(snapDir, "a"), Version: snapshotVersion, Snapshot: true})
		snapTook = time.Since(start)
	})
	if snapErr != nil {
		t.Fatalf("release snapshot: %v", snapErr)
	}
	return snapB
}

// hostKVHint extracts kvhint for this machine's platform from its
// archive.
func hostKVHint(t *testing.T, b *Bundle) string {
	t.Helper()
	p := Platform{runtime.GOOS, runtime.GOARCH}
	archive, ok := b.Archives[p]
	if !ok {
		t.Skipf("no archive for %s", p)
	}
	files := untgz(t, archive)
	name := strings.TrimSuffix(filepath.Base(archive), ".tar.gz")
	exe, ok := files[name+"/kvhint"]
	if !ok {
		t.Fatalf("%s has no %s/kvhint: %v", archive, name, keys(files))
	}
	bin := filepath.Join(t.TempDir(), "kvhint")
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// readLayout unpacks the OCI layout tar at path and checks it: an index
// tagged with the release's version, with an image of name for
// linux/amd64 and linux/arm64 (/NAME, run as 65532:65532, one layer), and
// an SBOM whose subject is that index. It returns the layout, the index's
// and the SBOM's descriptors, and each platform's /NAME.
func readLayout(t *testing.T, path, name string) (layout.Path, *v1.Descriptor, *v1.Descriptor, map[Platform][]byte) {
	t.Helper()
	layoutDir := t.TempDir()
	lf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for n, data := range untarReader(t, lf) {
		if strings.HasSuffix(n, "/") {
			continue
		}
		p := filepath.Join(layoutDir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lf.Close()
	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var indexDesc, sbomDesc *v1.Descriptor
	for i, d := range tm.Manifests {
		switch {
		case d.Annotations["org.opencontainers.image.ref.name"] == snapshotVersion:
			indexDesc = &tm.Manifests[i]
		case d.ArtifactType == SBOMMediaType:
			sbomDesc = &tm.Manifests[i]
		}
	}
	if indexDesc == nil || sbomDesc == nil {
		t.Fatalf("%s: index.json lacks the image tagged %s or the SBOM: %+v", path, snapshotVersion, tm.Manifests)
	}
	idx, err := top.ImageIndex(indexDesc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	exes := map[Platform][]byte{}
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture ||
			!cmp.Equal(cf.Config.Entrypoint, []string{"/" + name}) || cf.Config.User != "65532:65532" {
			t.Errorf("%s %s: config %+v", name, d.Platform, cf)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s %s: %d layers, %v", name, d.Platform, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		files := untarReader(t, rc)
		rc.Close()
		if len(files[name]) == 0 {
			t.Errorf("%s %s: no /%s in the layer: %v", name, d.Platform, name, keys(files))
		}
		exes[Platform{d.Platform.OS, d.Platform.Architecture}] = files[name]
	}
	if !cmp.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("%s image platforms %v", name, platforms)
	}
	return lp, indexDesc, sbomDesc, exes
}

func untgz(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return untarReader(t, zr)
}

func untarReader(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = data
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestReleaseArtifacts checks the snapshot release as a user would get
// it: every artifact listed in SHA256SUMS with its sum; kvhint of each
// archive, run here for this machine's platform, prints the version,
// commit and date stamped; the image layout holds the index whose digest
// install.yaml and the chart name, for linux/amd64 and linux/arm64, each
// running the archive's kvhint, with the SBOM as its referrer; the
// packaged chart, rendered with the Helm SDK for Kubernetes 1.37, is
// install.yaml (the objects, their content, the same image) but for the
// Namespace, which Helm leaves to --create-namespace; and a second run
// gives the same bytes.
func TestReleaseArtifacts(t *testing.T) {
	b := snapshot(t)
	t.Logf("snapshot release %s (commit %s, date %s) in %s", b.Version, b.Commit, b.Date, snapTook.Round(time.Second))
	out := filepath.Dir(b.Sums)

	// SHA256SUMS: every artifact, each sum right, nothing else in dist/.
	sums, err := os.ReadFile(b.Sums)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(l, "  ")
		data, err := os.ReadFile(filepath.Join(out, name))
		if !ok || err != nil {
			t.Fatalf("SHA256SUMS line %q: %v", l, err)
		}
		h := sha256.Sum256(data)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: sum does not match", name)
		}
		listed[name] = true
		t.Logf("%10d  %s", len(data), name)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("%s is in the release but not in SHA256SUMS", e.Name())
		}
	}
	want := []string{
		"install.yaml", "crds.yaml", "kv-hint-operator-0.1.0.tgz",
		"kvhint_v0.1.0_image.oci.tar", "kvhint_v0.1.0_sbom.cdx.json",
		"kvhint_v0.1.0_darwin_amd64.tar.gz", "kvhint_v0.1.0_darwin_arm64.tar.gz",
		"kvhint_v0.1.0_linux_amd64.tar.gz", "kvhint_v0.1.0_linux_arm64.tar.gz",
		"kvhint-dev_v0.1.0_image.oci.tar", "router.yaml",
	}
	for _, n := range want {
		if !listed[n] {
			t.Errorf("SHA256SUMS lacks %s", n)
		}
	}

	// kvhint version, as stamped.
	bin := hostKVHint(t, b)
	v, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("kvhint version: %v\n%s", err, v)
	}
	for _, line := range []string{"kvhint " + snapshotVersion, "commit: " + b.Commit, "date: " + b.Date} {
		if !strings.Contains(string(v), line+"\n") {
			t.Errorf("kvhint version lacks %q:\n%s", line, v)
		}
	}
	if _, err := time.Parse(time.RFC3339, b.Date); err != nil || len(strings.TrimSuffix(b.Commit, "-dirty")) != 40 {
		t.Errorf("stamped commit %q, date %q", b.Commit, b.Date)
	}
	t.Logf("kvhint version:\n%s", v)

	// The image layout.
	lp, indexDesc, sbomDesc, images := readLayout(t, b.ImageLayout, "kvhint")
	if indexDesc.Digest.String() != b.Digest || !strings.HasSuffix(b.Image, "@"+b.Digest) {
		t.Errorf("layout's index %s, release digest %s, image %s", indexDesc.Digest, b.Digest, b.Image)
	}
	for p, exe := range images {
		archive := untgz(t, b.Archives[p])
		name := strings.TrimSuffix(filepath.Base(b.Archives[p]), ".tar.gz")
		if !bytes.Equal(exe, archive[name+"/kvhint"]) {
			t.Errorf("%s: the image's /kvhint is not the archive's kvhint", p)
		}
	}

	// The stand-in router's image: kvhint-dev of this release, which
	// router.yaml runs, pinned by the layout's digest.
	_, standInDesc, standInSBOM, standIns := readLayout(t, b.StandInLayout, "kvhint-dev")
	if standInDesc.Digest.String() != b.StandInDigest || b.StandInImage != StandInRepository+":"+snapshotVersion+"@"+b.StandInDigest {
		t.Errorf("stand-in layout's index %s, release digest %s, image %s", standInDesc.Digest, b.StandInDigest, b.StandInImage)
	}
	if standInSBOM.Digest == sbomDesc.Digest {
		t.Errorf("the stand-in image's SBOM is kvhint's")
	}
	if exe, ok := standIns[Platform{runtime.GOOS, runtime.GOARCH}]; ok {
		dev := filepath.Join(t.TempDir(), "kvhint-dev")
		if err := os.WriteFile(dev, exe, 0o755); err != nil {
			t.Fatal(err)
		}
		v, err := exec.Command(dev, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(v), "kvhint "+snapshotVersion+"\n") || !strings.Contains(string(v), "commit: "+b.Commit+"\n") {
			t.Errorf("the stand-in image's kvhint-dev version: %v\n%s", err, v)
		}
		h, err := exec.Command(dev, "router", "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(h), "--hints-url") {
			t.Errorf("the stand-in image's kvhint-dev router --help: %v\n%s", err, h)
		}
	}
	routerObjs := readObjs(t, b.Router)
	kinds := map[string]bool{}
	for _, o := range routerObjs {
		kinds[o.GetKind()] = true
		if o.GetNamespace() != "" {
			t.Errorf("router.yaml: %s has namespace %q; it is applied with -n", ident(o), o.GetNamespace())
		}
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		var imgs []string
		for _, c := range cs {
			imgs = append(imgs, c.(map[string]any)["image"].(string))
		}
		if !cmp.Equal(imgs, []string{b.StandInImage}) {
			t.Errorf("router.yaml's Deployment runs %q, want the stand-in image %s alone (the sidecar is injected)", imgs, b.StandInImage)
		}
	}
	for _, k := range []string{"Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"} {
		if !kinds[k] {
			t.Errorf("router.yaml has no %s", k)
		}
	}

	// The SBOM: the referrer's blob is the release's file, a CycloneDX
	// document of the modules linked.
	sbomJSON, err := os.ReadFile(b.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	rawRef, err := lp.Bytes(sbomDesc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := v1.ParseManifest(bytes.NewReader(rawRef))
	if err != nil {
		t.Fatal(err)
	}
	if ref.Subject == nil || ref.Subject.Digest.String() != b.Digest || len(ref.Layers) != 1 {
		t.Fatalf("the SBOM's manifest: %s", rawRef)
	}
	blob, err := lp.Bytes(ref.Layers[0].Digest)
	if err != nil || !bytes.Equal(blob, sbomJSON) {
		t.Errorf("the layout's SBOM is not %s (%v)", filepath.Base(b.SBOM), err)
	}
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(sbomJSON), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	comps := map[string]bool{}
	for _, c := range *bom.Components {
		comps[c.Name] = true
	}
	if bom.Metadata.Component.Version != snapshotVersion || !comps["k8s.io/client-go"] || !comps["sigs.k8s.io/controller-runtime"] {
		t.Errorf("SBOM: main %+v, %d components", bom.Metadata.Component, len(comps))
	}

	// Published to a registry on loopback: the index by tag, with the
	// release's digest, and the SBOM listed as its referrer.
	reg := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	regRepo := strings.TrimPrefix(reg.URL, "http://") + "/kvrouter/kvhint"
	pushed, err := Publish(b.ImageLayout, regRepo)
	if err != nil {
		t.Fatal(err)
	}
	if want := regRepo + ":" + snapshotVersion + "@" + b.Digest; pushed != want {
		t.Errorf("pushed %s, want %s", pushed, want)
	}
	tagRef, err := name.NewTag(regRepo + ":" + snapshotVersion)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(tagRef)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d.String() != b.Digest {
		t.Errorf("the registry's %s is %s, want %s", tagRef, d, b.Digest)
	}
	referrers, err := remote.Referrers(tagRef.Context().Digest(b.Digest))
	if err != nil {
		t.Fatal(err)
	}
	// (The test registry lists a referrer under its config's media type,
	// where OCI 1.1 registries list the manifest's artifactType: the
	// digest is what is compared.)
	if rm, err := referrers.IndexManifest(); err != nil || len(rm.Manifests) != 1 || rm.Manifests[0].Digest != sbomDesc.Digest {
		t.Errorf("referrers of the index: %+v, %v; want the SBOM %s", rm, err, sbomDesc.Digest)
	}

	// The chart against install.yaml.
	c, err := Load(b.Chart)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Version != "0.1.0" || c.Metadata.AppVersion != snapshotVersion {
		t.Errorf("packaged chart version %s, appVersion %s", c.Metadata.Version, c.Metadata.AppVersion)
	}
	objs, err := Render(c, nil, namespace)
	if err != nil {
		t.Fatal(err)
	}
	install := readObjs(t, b.Install)
	if img := imageOf(t, objs); img != b.Image || imageOf(t, install) != b.Image {
		t.Errorf("chart image %s, install.yaml image %s, want %s", img, imageOf(t, install), b.Image)
	}
	index := func(objs []*unstructured.Unstructured) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, o := range objs {
			if o.GetKind() != "Namespace" {
				m[ident(o)] = content(o)
			}
		}
		return m
	}
	g, w := index(objs), index(install)
	for _, k := range keys(w) {
		if g[k] == nil {
			t.Errorf("install.yaml has %s, the chart does not render it", k)
		} else if diff := cmp.Diff(w[k], g[k]); diff != "" {
			t.Errorf("%s (-install.yaml +chart):\n%s", k, diff)
		}
	}
	for _, k := range keys(g) {
		if w[k] == nil {
			t.Errorf("the chart renders %s, install.yaml does not", k)
		}
	}
	if len(w) < 20 {
		t.Errorf("install.yaml has only %d objects", len(w))
	}
	for _, s := range b.SortedSizes() {
		t.Log(s)
	}
	for name, n := range b.CRDJSONBytes {
		if n >= LastAppliedLimit {
			t.Errorf("CRD %s is %d bytes as JSON: a client-side apply would fail; say so in docs/install.md", name, n)
		}
	}

	// Reproducible: the same commit gives the same bytes.
	start := time.Now()
	again, err := Release(Options{Repo: repo, Out: filepath.Join(snapDir, "b"), Version: snapshotVersion, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second run in %s", time.Since(start).Round(time.Second))
	for _, f := range append(b.Files(), b.Sums) {
		x, _ := os.ReadFile(f)
		y, err := os.ReadFile(filepath.Join(filepath.Dir(again.Sums), filepath.Base(f)))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs (%v)", filepath.Base(f), err)
		}
	}
}

// TestReleaseRefuses: a version that is not vX.Y.Z, and a release (not a
// snapshot) with no version, are refused before anything is built.
func TestReleaseRefuses(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Repo: repo, Out: t.TempDir(), Version: "1.2", Snapshot: true}, "want vX.Y.Z"},
		{Options{Repo: repo, Out: t.TempDir(), Version: "latest", Snapshot: true}, "want vX.Y.Z"},
		{Options{Repo: repo, Out: t.TempDir()}, "VERSION is required"},
		{Options{Repo: t.TempDir(), Out: t.TempDir(), Version: "v1.0.0"}, "git rev-parse HEAD"},
	} {
		if _, err := Release(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
