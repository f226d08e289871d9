package chart

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// DevImage is the image config/ names; a release replaces it with the
// release's image, pinned by digest.
const DevImage = "ghcr.io/kvrouter/kvhint:dev"

// ImageRepository is where the release's image is published.
const ImageRepository = "ghcr.io/kvrouter/kvhint"

// StandInDevImage is the stand-in router's image config/router names; a
// release replaces it with the release's, pinned by digest, in router.yaml.
// StandInRepository is where that image is published.
const (
	StandInDevImage   = "ghcr.io/kvrouter/kvhint-dev:dev"
	StandInRepository = "ghcr.io/kvrouter/kvhint-dev"
)

// LastAppliedLimit is the most a kubectl.kubernetes.io/last-applied-configuration
// annotation may hold: all of an object's annotations together are capped
// at 256 KiB, and a client-side apply stores the whole object there.
const LastAppliedLimit = 262144

var semver = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// Options say what Release builds.
type Options struct {
	// Repo is the repository's root; Out the folder the artifacts go to.
	Repo, Out string
	// Version is the release, vX.Y.Z (the chart's version is X.Y.Z). A
	// snapshot without one is v0.0.0-snapshot-COMMIT.
	Version string
	// Snapshot allows a work tree with uncommitted changes (the commit
	// is then stamped COMMIT-dirty); a release refuses one.
	Snapshot bool
}

// Bundle is what Release writes.
type Bundle struct {
	Version, Commit, Date string
	// Image is the release's image by tag and digest, as install.yaml and
	// the chart name it; Digest the digest of its OCI index.
	Image, Digest string
	// Archives are the kvhint archives by platform.
	Archives map[Platform]string
	// ImageLayout is the OCI image layout (the index, each platform's
	// image, the SBOM as the index's referrer) as a tar file.
	ImageLayout, SBOM          string
	Install, CRDs, Chart, Sums string
	// StandInImage is the stand-in router's image (kvhint-dev) by tag and
	// digest, StandInLayout its OCI image layout with its own SBOM as the
	// referrer, and Router config/router with that image: a router
	// Deployment that goes Ready before your own router is in place.
	StandInImage, StandInDigest, StandInLayout string
	Router                                     string
	CRDJSONBytes                               map[string]int
}

// Files are the artifacts SHA256SUMS lists, in its order.
func (b *Bundle) Files() []string {
	var fs []string
	for _, p := range CLIPlatforms {
		fs = append(fs, b.Archives[p])
	}
	fs = append(fs, b.ImageLayout, b.SBOM, b.Install, b.CRDs, b.Chart, b.StandInLayout, b.Router)
	sort.Slice(fs, func(i, j int) bool { return filepath.Base(fs[i]) < filepath.Base(fs[j]) })
	return fs
}

// gitInfo returns the commit, its date (SOURCE_DATE_EPOCH when set, as
// reproducible builds define it) and whether the work tree has changes.
func gitInfo(repo string) (commit string, date time.Time, dirty bool, err error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if commit, err = git("rev-parse", "HEAD"); err != nil {
		return
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct", "HEAD"); err != nil {
			return
		}
	}
	sec, perr := strconv.ParseInt(epoch, 10, 64)
	if perr != nil {
		err = fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", epoch)
		return
	}
	date = time.Unix(sec, 0).UTC()
	status, err := git("status", "--porcelain", "--untracked-files=no")
	dirty = status != ""
	return
}

// Release builds the release into o.Out:
//   - kvhint_VERSION_OS_ARCH.tar.gz for linux and darwin on amd64 and
//     arm64, kvhint stamped with the version, commit and date;
//   - kvhint_VERSION_image.oci.tar: the multi-arch image (linux/amd64,
//     linux/arm64) as an OCI image layout, with its SBOM as a referrer;
//   - kvhint_VERSION_sbom.cdx.json: that SBOM (CycloneDX), on its own;
//   - install.yaml (kustomize build config/default, the image pinned by
//     the index's digest) and crds.yaml;
//   - kv-hint-operator-X.Y.Z.tgz: the chart at that version and
//     appVersion, its default image the same as install.yaml's;
//   - kvhint-dev_VERSION_image.oci.tar: the stand-in router's image
//     (kvhint-dev), with its SBOM as a referrer, and router.yaml:
//     config/router with that image pinned by digest;
//   - SHA256SUMS over all of them.
//
// Every file's bytes depend only on the commit, the Go toolchain and
// SOURCE_DATE_EPOCH (default: the commit's date).
func Release(o Options) (*Bundle, error) {
	version := o.Version
	if version != "" && !strings.HasPrefix(version, "v") {
		version = "v" + version
	}
	if version == "" && !o.Snapshot {
		return nil, fmt.Errorf("VERSION is required (vX.Y.Z)")
	}
	if version != "" && !semver.MatchString(version) {
		return nil, fmt.Errorf("VERSION %q: want vX.Y.Z (a semantic version)", o.Version)
	}
	commit, created, dirty, err := gitInfo(o.Repo)
	if err != nil {
		return nil, err
	}
	if dirty {
		if !o.Snapshot {
			return nil, fmt.Errorf("the work tree at %s has uncommitted changes: commit them, or build a snapshot", o.Repo)
		}
		commit += "-dirty"
	}
	if version == "" {
		version = "v0.0.0-snapshot-" + commit[:12]
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	date := created.Format(time.RFC3339)
	b := &Bundle{Version: version, Commit: commit, Date: date, Archives: map[Platform]string{}, CRDJSONBytes: map[string]int{}}

	// The binaries, in a scratch folder; the archives.
	work, err := os.MkdirTemp("", "kvhint-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	// Two builds at a time: a link and a compression each use about one
	// core. kvhint for every CLI platform, with its archive; the stand-in
	// router's kvhint-dev for the image platforms.
	bins, standIn := map[Platform]string{}, map[Platform]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	slots := make(chan struct{}, 2)
	build := func(name string, p Platform, done func(bin string) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			bin, err := buildCommand(o.Repo, filepath.Join(work, "bin"), name, p, version, commit, date)
			if err == nil {
				err = done(bin)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	for _, p := range CLIPlatforms {
		build("kvhint", p, func(bin string) error {
			archive, err := writeArchive(o.Repo, o.Out, bin, p, version, created)
			mu.Lock()
			bins[p], b.Archives[p] = bin, archive
			mu.Unlock()
			return err
		})
	}
	for _, p := range ImagePlatforms {
		build("kvhint-dev", p, func(bin string) error {
			mu.Lock()
			standIn[p] = bin
			mu.Unlock()
			return nil
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	// The images, each with its SBOM.
	var sb []byte
	b.Image, b.Digest, b.ImageLayout, sb, err = imageLayout(work, o.Out, "kvhint", ImageRepository, bins, version, commit, created)
	if err != nil {
		return nil, err
	}
	b.SBOM = filepath.Join(o.Out, "kvhint_"+version+"_sbom.cdx.json")
	if err := os.WriteFile(b.SBOM, sb, 0o644); err != nil {
		return nil, err
	}
	b.StandInImage, b.StandInDigest, b.StandInLayout, _, err = imageLayout(work, o.Out, "kvhint-dev", StandInRepository, standIn, version, commit, created)
	if err != nil {
		return nil, err
	}

	// The manifests.
	objs, err := Kustomize(filepath.Join(o.Repo, "config", "default"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/default: %w", err)
	}
	if err := setImage(objs, b.Image); err != nil {
		return nil, err
	}
	b.Install = filepath.Join(o.Out, "install.yaml")
	if err := writeYAML(b.Install, "kv-hint-operator "+version+": everything (kubectl apply --server-side -f install.yaml)", objs); err != nil {
		return nil, err
	}
	crds, err := Kustomize(filepath.Join(o.Repo, "config", "crd"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/crd: %w", err)
	}
	for _, c := range crds {
		js, err := json.Marshal(c.Object)
		if err != nil {
			return nil, err
		}
		b.CRDJSONBytes[c.GetName()] = len(js)
	}
	b.CRDs = filepath.Join(o.Out, "crds.yaml")
	if err := writeYAML(b.CRDs, "kv-hint-operator "+version+": the CRDs alone", crds); err != nil {
		return nil, err
	}

	// The stand-in router's Deployment, its sidecar's RBAC and its
	// NetworkPolicy.
	router, err := Kustomize(filepath.Join(o.Repo, "config", "router"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/router: %w", err)
	}
	if err := setStandInImage(router, b.StandInImage); err != nil {
		return nil, err
	}
	b.Router = filepath.Join(o.Out, "router.yaml")
	if err := writeYAML(b.Router, "kv-hint-operator "+version+": router llama, the stand-in router with the kvhint sidecar injected (kubectl apply --server-side -n NAMESPACE -f router.yaml)", router); err != nil {
		return nil, err
	}

	// The chart.
	if b.Chart, err = packageChart(filepath.Join(o.Repo, "charts", "kv-hint-operator"), o.Out, version, b.Image, created); err != nil {
		return nil, err
	}

	var sums strings.Builder
	for _, f := range b.Files() {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(data)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(h[:]), filepath.Base(f))
	}
	b.Sums = filepath.Join(o.Out, "SHA256SUMS")
	return b, os.WriteFile(b.Sums, []byte(sums.String()), 0o644)
}

// chartTagLine is the manager's image tag in values.yaml, which the
// packaged chart sets to the release's tag and digest.
const chartTagLine = "    # Default: the chart's appVersion.\n    tag: \"\"\n"

// packageChart packages the chart at dir as version (X.Y.Z; appVersion
// vX.Y.Z), its manager image's tag set to image's tag and digest, every
// file dated mtime.
func packageChart(dir, out, version, image string, mtime time.Time) (string, error) {
	c, err := Load(dir)
	if err != nil {
		return "", err
	}
	c.Metadata.Version = strings.TrimPrefix(version, "v")
	c.Metadata.AppVersion = version
	tag := strings.TrimPrefix(image, ImageRepository+":")
	found := false
	for _, f := range c.Raw {
		if f.Name == chartutil.ValuesfileName {
			if strings.Count(string(f.Data), chartTagLine) != 1 {
				return "", fmt.Errorf("%s/values.yaml: want one manager image tag line %q", dir, chartTagLine)
			}
			f.Data = bytes.Replace(f.Data, []byte(chartTagLine),
				[]byte("    # The release's image, by tag and digest.\n    tag: \""+tag+"\"\n"), 1)
			found = true
		}
	}
	if !found {
		return "", fmt.Errorf("%s: no values.yaml", dir)
	}
	mgr, _ := c.Values["manager"].(map[string]any)
	img, _ := mgr["image"].(map[string]any)
	if img == nil {
		return "", fmt.Errorf("%s/values.yaml: no manager.image", dir)
	}
	img["tag"] = tag
	c.ModTime, c.SchemaModTime = mtime, mtime
	for _, fs := range [][]*common.File{c.Raw, c.Templates, c.Files} {
		for _, f := range fs {
			f.ModTime = mtime
		}
	}
	if err := c.Validate(); err != nil {
		return "", err
	}
	return chartutil.Save(c, out)
}

// imageLayout builds the multi-arch image of the binary name (one per
// image platform, in bins) and its SBOM, and writes them as an OCI image
// layout tar NAME_VERSION_image.oci.tar into out. It returns the image
// by tag and digest, the digest, the tar's path and the SBOM.
func imageLayout(work, out, name, repository string, bins map[Platform]string, version, commit string, created time.Time) (image, digest, path string, sb []byte, err error) {
	var imageBins []string
	for _, p := range ImagePlatforms {
		imageBins = append(imageBins, bins[p])
	}
	if sb, err = sbom(imageBins, version, commit, created); err != nil {
		return
	}
	idx, err := ociImage(imageSpec{Name: name, Binaries: bins, Repository: repository, Version: version, Commit: commit, Created: created})
	if err != nil {
		return
	}
	d, err := idx.Digest()
	if err != nil {
		return
	}
	digest = d.String()
	layoutDir := filepath.Join(work, "oci-"+name)
	if err = writeLayout(layoutDir, name, idx, version, sb); err != nil {
		err = fmt.Errorf("writing the OCI layout of %s: %w", name, err)
		return
	}
	lt, err := tarDir(layoutDir, created)
	if err != nil {
		return
	}
	path = filepath.Join(out, name+"_"+version+"_image.oci.tar")
	return repository + ":" + version + "@" + digest, digest, path, sb, os.WriteFile(path, lt, 0o644)
}

// setStandInImage names image for config/router's stand-in router
// container, and fails if config/router no longer names the dev image
// there.
func setStandInImage(objs []*unstructured.Unstructured, image string) error {
	found := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok && m["image"] == StandInDevImage {
				m["image"] = image
				found++
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
			return err
		}
	}
	if found != 1 {
		return fmt.Errorf("config/router names %s in %d containers, want 1 (the stand-in router)", StandInDevImage, found)
	}
	return nil
}

// setImage names image for the manager's and the injected sidecar's, and
// fails if config/ no longer names the dev image where it is expected.
func setImage(objs []*unstructured.Unstructured, image string) error {
	found := 0
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "kvhint-manager":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for i, c := range cs {
				m := c.(map[string]any)
				if m["image"] == DevImage {
					m["image"] = image
					cs[i] = m
					found++
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
				return err
			}
		case o.GetKind() == "ConfigMap" && o.GetName() == "kvhint-sidecar-injection":
			if v, _, _ := unstructured.NestedString(o.Object, "data", "image"); v == DevImage {
				if err := unstructured.SetNestedField(o.Object, image, "data", "image"); err != nil {
					return err
				}
				found++
			}
		}
	}
	if found != 2 {
		return fmt.Errorf("config/default names %s in %d places, want 2 (the manager and the injection parameters)", DevImage, found)
	}
	return nil
}

func writeYAML(path, title string, objs []*unstructured.Unstructured) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %s\n", title)
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		sb.WriteString("---\n")
		sb.Write(y)
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// SortedSizes lists CRDJSONBytes as "name: N bytes" lines.
func (b *Bundle) SortedSizes() []string {
	var out []string
	for n, s := range b.CRDJSONBytes {
		out = append(out, fmt.Sprintf("%s: %d bytes as JSON (%.0f%% of the %d-byte last-applied limit)", n, s, 100*float64(s)/LastAppliedLimit, LastAppliedLimit))
	}
	sort.Strings(out)
	return out
}
