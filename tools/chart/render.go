package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ReleaseName is the release name the tests and the bundle render with.
// The chart's object names do not depend on it: the admission policies
// know the manager and the sidecars by their ServiceAccounts' names.
const ReleaseName = "kv-hint-operator"

// Load loads the chart folder as helm does.
func Load(dir string) (*chartv2.Chart, error) {
	return loader.Load(dir)
}

// Values checks values against the chart's values.schema.json, merged
// over its values.yaml, and returns what templates see, as helm install
// prepares it for a cluster of DefaultKubeVersion.
func Values(c *chartv2.Chart, values map[string]any, namespace string) (common.Values, error) {
	caps, err := ClusterCapabilities(DefaultKubeVersion)
	if err != nil {
		return nil, err
	}
	return valuesFor(c, values, namespace, caps)
}

func valuesFor(c *chartv2.Chart, values map[string]any, namespace string, caps *common.Capabilities) (common.Values, error) {
	return util.ToRenderValuesWithSchemaValidation(c, values, common.ReleaseOptions{
		Name: ReleaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps, false)
}

// DefaultKubeVersion is the Kubernetes release Render renders for: the
// one the tests' kube-apiserver is.
const DefaultKubeVersion = "v1.37.2"

// ClusterCapabilities are the capabilities helm install finds on a
// cluster of kubeVersion (vMAJOR.MINOR.PATCH) with its default feature
// gates: every group/version and group/version/kind client-go knows, less
// the alpha and beta versions (off by default) and the kinds introduced
// after that release. Like discovery, it lists kinds, which `helm
// template` run without a cluster does not.
func ClusterCapabilities(kubeVersion string) (*common.Capabilities, error) {
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", kubeVersion, err)
	}
	minor, err := strconv.Atoi(kv.Minor)
	if err != nil || kv.Major != "1" {
		return nil, fmt.Errorf("kube version %q: want v1.MINOR.PATCH", kubeVersion)
	}
	type introduced interface{ APILifecycleIntroduced() (int, int) }
	type removed interface{ APILifecycleRemoved() (int, int) }
	set := map[string]bool{}
	for gvk, typ := range scheme.Scheme.AllKnownTypes() {
		if strings.Contains(gvk.Version, "alpha") || strings.Contains(gvk.Version, "beta") || gvk.Version == "__internal" {
			continue
		}
		obj := reflect.New(typ).Interface()
		if i, ok := obj.(introduced); ok {
			if ma, mi := i.APILifecycleIntroduced(); ma > 1 || (ma == 1 && mi > minor) {
				continue
			}
		}
		if r, ok := obj.(removed); ok {
			if ma, mi := r.APILifecycleRemoved(); ma == 1 && mi <= minor {
				continue
			}
		}
		gv := gvk.GroupVersion().String()
		set[gv] = true
		set[gv+"/"+gvk.Kind] = true
	}
	// CRDs, as Helm's own default set has them.
	set["apiextensions.k8s.io/v1"] = true
	set["apiextensions.k8s.io/v1/CustomResourceDefinition"] = true
	vs := make(common.VersionSet, 0, len(set))
	for v := range set {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	caps.APIVersions = vs
	return caps, nil
}

// Render renders the chart with values in strict mode (a missing value is
// an error) for a cluster of DefaultKubeVersion and returns its objects,
// in template file order, NOTES left out.
func Render(c *chartv2.Chart, values map[string]any, namespace string) ([]*unstructured.Unstructured, error) {
	caps, err := ClusterCapabilities(DefaultKubeVersion)
	if err != nil {
		return nil, err
	}
	objs, _, err := RenderFor(c, values, namespace, caps)
	return objs, err
}

// RenderFor renders the chart as Render does for a cluster of caps, and
// also returns NOTES.txt as rendered.
func RenderFor(c *chartv2.Chart, values map[string]any, namespace string, caps *common.Capabilities) ([]*unstructured.Unstructured, string, error) {
	vals, err := valuesFor(c, values, namespace, caps)
	if err != nil {
		return nil, "", err
	}
	out, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return nil, "", err
	}
	notes := ""
	for name, text := range out {
		if strings.HasSuffix(name, "/NOTES.txt") {
			notes = text
		}
	}
	names := make([]string, 0, len(out))
	for name := range out {
		if strings.HasSuffix(name, ".yaml") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
		o, err := Decode([]byte(out[name]))
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", filepath.Base(name), err)
		}
		objs = append(objs, o...)
	}
	return objs, notes, nil
}

// Kustomize builds a kustomization folder as `kubectl kustomize` does.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	y, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	return Decode(y)
}

// Decode reads a stream of YAML documents; empty ones are skipped.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
}
