package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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
// prepares it.
func Values(c *chartv2.Chart, values map[string]any, namespace string) (common.Values, error) {
	return util.ToRenderValuesWithSchemaValidation(c, values, common.ReleaseOptions{
		Name: ReleaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, common.DefaultCapabilities, false)
}

// Render renders the chart with values in strict mode (a missing value is
// an error) and returns its objects, in template file order, NOTES left
// out.
func Render(c *chartv2.Chart, values map[string]any, namespace string) ([]*unstructured.Unstructured, error) {
	vals, err := Values(c, values, namespace)
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return nil, err
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
			return nil, fmt.Errorf("%s: %w", filepath.Base(name), err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
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
