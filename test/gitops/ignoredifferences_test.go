package gitops_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/itchyny/gojq"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// argoIgnored normalizes obj as Argo CD does with the jqPathExpressions of
// argocd-cm's resource.customizations.ignoreDifferences.<key>: each
// expression e is run with gojq, Argo CD's jq, as del(e).
func argoIgnored(t *testing.T, key string, obj map[string]any) map[string]any {
	t.Helper()
	cm := argoCM(t)
	text, ok := cm.Data["resource.customizations.ignoreDifferences."+key]
	if !ok {
		t.Fatalf("argocd-cm.yaml has no ignoreDifferences for %s", key)
	}
	var diff struct {
		JQPathExpressions []string `json:"jqPathExpressions"`
	}
	if err := yaml.Unmarshal([]byte(text), &diff); err != nil {
		t.Fatal(err)
	}
	out := any(runtime.DeepCopyJSON(obj))
	for _, e := range diff.JQPathExpressions {
		q, err := gojq.Parse("del(" + e + ")")
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		v, ok := q.Run(out).Next()
		if !ok {
			t.Fatalf("%s: no result", e)
		}
		if err, isErr := v.(error); isErr {
			t.Fatalf("%s: %v", e, err)
		}
		out = v
	}
	return out.(map[string]any)
}

// manifestObject reads the first document of kind from a sample manifest
// as JSON values (what Argo CD compares).
func manifestObject(t *testing.T, file, kind string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("%s has no %s: %v", file, kind, err)
		}
		if obj["kind"] == kind {
			js, _ := json.Marshal(obj)
			var out map[string]any
			if err := json.Unmarshal(js, &out); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
}

// withEntries adds the manager's three entries to a pod template (as JSON
// values), and a variable of the owner's that names another file to
// another container when other is not empty: the one difference Argo CD
// must still show.
func withEntries(t *testing.T, tmpl map[string]any, container, other string) {
	t.Helper()
	spec := tmpl["spec"].(map[string]any)
	vols, _ := spec["volumes"].([]any)
	spec["volumes"] = append(vols, map[string]any{"name": v1alpha1.PolicyVolumeName, "configMap": map[string]any{"name": "llama-hints-0123456789abcdef", "defaultMode": float64(420)}})
	found := false
	for _, c := range spec["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] == container {
			found = true
			mounts, _ := c["volumeMounts"].([]any)
			c["volumeMounts"] = append(mounts, map[string]any{"name": v1alpha1.PolicyVolumeName, "mountPath": v1alpha1.PolicyMountPath, "readOnly": true})
			env, _ := c["env"].([]any)
			c["env"] = append(env, map[string]any{"name": v1alpha1.RouterPolicyConfigEnv, "value": v1alpha1.PolicyFilePath})
		}
	}
	if !found {
		t.Fatalf("no container %q", container)
	}
	if other != "" {
		spec["containers"] = append(spec["containers"].([]any), map[string]any{"name": other, "image": "other:1",
			"env": []any{map[string]any{"name": v1alpha1.RouterPolicyConfigEnv, "value": "/etc/other/hints.yaml"}}})
	}
}

// dropEmptyLists removes the lists a deletion left empty (env: [] where
// the manager's variable was the container's only one). Argo CD's diff
// does not see them: its three-way diff patches the live object with what
// the manifest and its last applied state change, and neither sets them.
func dropEmptyLists(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, item := range v {
			if l, ok := item.([]any); ok && len(l) == 0 {
				delete(v, k)
				continue
			}
			v[k] = dropEmptyLists(item)
		}
	case []any:
		for i := range v {
			v[i] = dropEmptyLists(v[i])
		}
	}
	return v
}

// TestArgoIgnoresOnlyTheEntries: argocd-cm's ignoreDifferences, run as
// Argo CD runs them (gojq), make the live DynamoGraphDeployment and
// Deployment, with the manager's three entries, compare equal to their
// manifests, and still show a variable of the owner's that names another
// file.
func TestArgoIgnoresOnlyTheEntries(t *testing.T) {
	for _, tc := range []struct {
		key, file, kind string
		template        func(obj map[string]any) map[string]any
		container       string
	}{
		{"nvidia.com_DynamoGraphDeployment", "../../config/samples/dynamo-graph/graph.yaml", "DynamoGraphDeployment",
			func(obj map[string]any) map[string]any {
				return obj["spec"].(map[string]any)["components"].([]any)[0].(map[string]any)["podTemplate"].(map[string]any)
			}, "main"},
		{"apps_Deployment", "../../config/samples/dynamo-router/router.yaml", "Deployment",
			func(obj map[string]any) map[string]any {
				return obj["spec"].(map[string]any)["template"].(map[string]any)
			}, "frontend"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			manifest := manifestObject(t, tc.file, tc.kind)
			live := runtime.DeepCopyJSON(manifest)
			withEntries(t, tc.template(live), tc.container, "")
			if got, want := dropEmptyLists(argoIgnored(t, tc.key, live)), argoIgnored(t, tc.key, manifest); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("with the manager's entries ignored, live and manifest differ:\nlive:     %v\nmanifest: %v", got, want)
			}
			owners := runtime.DeepCopyJSON(manifest)
			withEntries(t, tc.template(owners), tc.container, "other")
			got, _ := json.Marshal(argoIgnored(t, tc.key, owners))
			if !strings.Contains(string(got), "/etc/other/hints.yaml") {
				t.Errorf("the owner's own DYN_ROUTER_POLICY_CONFIG is ignored too: %s", got)
			}
		})
	}
}
