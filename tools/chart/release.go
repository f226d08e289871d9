package chart

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// DevImage is the image config/ names; a release replaces its tag.
const DevImage = "ghcr.io/kvrouter/kvhint:dev"

// LastAppliedLimit is the most a kubectl.kubernetes.io/last-applied-configuration
// annotation may hold: all of an object's annotations together are capped
// at 256 KiB, and a client-side apply stores the whole object there.
const LastAppliedLimit = 262144

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// Bundle is what `make release` writes into out.
type Bundle struct {
	Install, CRDs, Chart, Sums string
	// CRDJSONBytes is the size of each CRD as JSON, which a client-side
	// apply would store in its last-applied annotation.
	CRDJSONBytes map[string]int
}

// Release writes the release bundle for version (x.y.z; images and the
// chart's appVersion are tagged vx.y.z) into out: install.yaml (kustomize
// build config/default, the image tagged), crds.yaml (config/crd), the
// packaged chart, and SHA256SUMS over the three.
func Release(repo, version, out string) (*Bundle, error) {
	if !semver.MatchString(version) {
		return nil, fmt.Errorf("VERSION %q: want x.y.z (semantic version, no leading v)", version)
	}
	tag := "v" + version
	image := strings.TrimSuffix(DevImage, ":dev") + ":" + tag
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	b := &Bundle{CRDJSONBytes: map[string]int{}}

	objs, err := Kustomize(filepath.Join(repo, "config", "default"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/default: %w", err)
	}
	if err := setImage(objs, image); err != nil {
		return nil, err
	}
	b.Install = filepath.Join(out, "install.yaml")
	if err := writeYAML(b.Install, "kv-hint-operator "+tag+": everything (kubectl apply --server-side -f install.yaml)", objs); err != nil {
		return nil, err
	}

	crds, err := Kustomize(filepath.Join(repo, "config", "crd"))
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
	b.CRDs = filepath.Join(out, "crds.yaml")
	if err := writeYAML(b.CRDs, "kv-hint-operator "+tag+": the CRDs alone", crds); err != nil {
		return nil, err
	}

	c, err := Load(filepath.Join(repo, "charts", "kv-hint-operator"))
	if err != nil {
		return nil, err
	}
	c.Metadata.Version = version
	c.Metadata.AppVersion = tag
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if b.Chart, err = chartutil.Save(c, out); err != nil {
		return nil, err
	}

	var sums strings.Builder
	for _, f := range []string{b.Install, b.CRDs, b.Chart} {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(data)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(h[:]), filepath.Base(f))
	}
	b.Sums = filepath.Join(out, "SHA256SUMS")
	return b, os.WriteFile(b.Sums, []byte(sums.String()), 0o644)
}

// setImage tags the manager's image and the injected sidecar's, and fails
// if config/ no longer names the dev image where it is expected.
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
