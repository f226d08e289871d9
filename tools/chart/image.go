package chart

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SBOMMediaType is the SBOM's media type, as the image's referrer and as
// the artifactType OCI registries list it by.
const SBOMMediaType = "application/vnd.cyclonedx+json"

// The OCI empty descriptor: the config of an artifact that has none.
const emptyJSON = "{}"

// imageSpec is what an image is made of.
type imageSpec struct {
	// Name is the binary's name: the image runs /NAME.
	Name                string
	Binaries            map[Platform]string // the binary of each image platform
	Repository, Version string
	Commit              string
	Created             time.Time
}

// ociImage is a multi-arch image: each platform's image is the binary as
// /NAME on an empty base (kvhint and kvhint-dev are static and need no
// files), run as 65532:65532, the Dockerfile's distroless nonroot user.
func ociImage(s imageSpec) (v1.ImageIndex, error) {
	anns := map[string]string{
		"org.opencontainers.image.title":    s.Name,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Commit,
		"org.opencontainers.image.created":  s.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":   "https://github.com/kvrouter/kv-hint-operator",
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range ImagePlatforms {
		exe, err := os.ReadFile(s.Binaries[p])
		if err != nil {
			return nil, err
		}
		t, err := writeTar([]tarEntry{{Name: s.Name, Mode: 0o755, Data: exe}}, s.Created)
		if err != nil {
			return nil, err
		}
		// Compressed once here: from uncompressed bytes the layer would
		// be compressed again for its digest and for each write.
		z, err := gz(t)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(z)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		created := v1.Time{Time: s.Created.UTC()}
		img, err = mutate.ConfigFile(img, &v1.ConfigFile{
			Architecture: p.Arch, OS: p.OS, Created: created,
			Config: v1.Config{
				Entrypoint: []string{"/" + s.Name}, User: "65532:65532", WorkingDir: "/",
				Env:    []string{"PATH=/"},
				Labels: anns,
			},
			RootFS: v1.RootFS{Type: "layers"},
		})
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			History: v1.History{Created: created, CreatedBy: "kvhint-release: COPY " + s.Name + " /" + s.Name, Comment: s.Name + " " + s.Version}})
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch},
		}})
	}
	return mutate.Annotations(idx, anns).(v1.ImageIndex), nil
}

// sbom is a CycloneDX 1.6 document of kvhint's Go modules, read from the
// build information the Go linker writes into each binary (what `go
// version -m` prints): the main module at the release's version, and every
// module linked into any of the binaries, with its go.sum hash.
func sbom(bins []string, version, commit string, created time.Time) ([]byte, error) {
	const mainPath = "github.com/kvrouter/kv-hint-operator"
	type mod struct{ path, version, sum string }
	mods := map[string]mod{}
	goVersion := ""
	for _, b := range bins {
		bi, err := buildinfo.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("reading the build information of %s: %w", b, err)
		}
		if bi.Main.Path != mainPath {
			return nil, fmt.Errorf("%s: main module %q, want %s", b, bi.Main.Path, mainPath)
		}
		goVersion = bi.GoVersion
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods[d.Path+"@"+d.Version] = mod{d.Path, d.Version, d.Sum}
		}
	}
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	purl := func(path, version string) string { return "pkg:golang/" + path + "@" + version }
	root := cdx.Component{
		BOMRef: purl(mainPath, version), Type: cdx.ComponentTypeApplication,
		Name: mainPath, Version: version, PackageURL: purl(mainPath, version),
		Properties: &[]cdx.Property{{Name: "vcs.revision", Value: commit}, {Name: "go.version", Value: goVersion}},
	}
	var comps []cdx.Component
	var refs []string
	for _, k := range keys {
		m := mods[k]
		c := cdx.Component{BOMRef: purl(m.path, m.version), Type: cdx.ComponentTypeLibrary,
			Name: m.path, Version: m.version, PackageURL: purl(m.path, m.version)}
		if m.sum != "" {
			c.Properties = &[]cdx.Property{{Name: "go.sum", Value: m.sum}}
		}
		comps = append(comps, c)
		refs = append(refs, c.BOMRef)
	}
	bom := cdx.NewBOM()
	// A serial number derived from the content, so that the document is
	// reproducible (a random one would change each run).
	h := sha256.Sum256([]byte(version + "\n" + commit + "\n" + strings.Join(keys, "\n")))
	x := hex.EncodeToString(h[:16])
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%s-%s-5%s-8%s-%s", x[0:8], x[8:12], x[13:16], x[17:20], x[20:32])
	bom.Metadata = &cdx.Metadata{
		Timestamp: created.UTC().Format(time.RFC3339),
		Component: &root,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication,
			Name: "kvhint-release", Version: version}}},
	}
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: root.BOMRef, Dependencies: &refs}}
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout writes idx, the image of name, as an OCI image layout in
// dir, tagged tag, with the SBOM as an OCI 1.1 artifact whose subject is
// the index (what `oras discover` or `cosign download sbom` find once the
// layout is pushed).
func writeLayout(dir, name string, idx v1.ImageIndex, tag string, sbomJSON []byte) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	blob := func(data []byte, mt types.MediaType) (v1.Descriptor, error) {
		h, n, err := v1.SHA256(bytes.NewReader(data))
		if err != nil {
			return v1.Descriptor{}, err
		}
		return v1.Descriptor{MediaType: mt, Digest: h, Size: n}, p.WriteBlob(h, io.NopCloser(bytes.NewReader(data)))
	}
	cfg, err := blob([]byte(emptyJSON), "application/vnd.oci.empty.v1+json")
	if err != nil {
		return err
	}
	layer, err := blob(sbomJSON, SBOMMediaType)
	if err != nil {
		return err
	}
	layer.Annotations = map[string]string{"org.opencontainers.image.title": name + ".cdx.json"}
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: SBOMMediaType,
		Config: cfg, Layers: []v1.Descriptor{layer},
		Subject: &v1.Descriptor{MediaType: types.OCIImageIndex, Digest: d, Size: int64(len(raw))},
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return err
	}
	md, err := blob(mj, types.OCIManifestSchema1)
	if err != nil {
		return err
	}
	md.ArtifactType = SBOMMediaType
	return p.AppendDescriptor(md)
}

// tarDir archives a folder's files in name order, reproducibly.
func tarDir(dir string, mtime time.Time) ([]byte, error) {
	var entries []tarEntry
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries = append(entries, tarEntry{Name: rel + "/", Mode: 0o755})
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		entries = append(entries, tarEntry{Name: rel, Mode: 0o644, Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return writeTar(entries, mtime)
}
