package workload

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// graphObject is a DGD with a frontend whose pod template has the router
// container main, a sidecar and a volume.
func graphObject() map[string]any {
	return map[string]any{
		"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
		"metadata": map[string]any{"name": "llama", "namespace": "ns"},
		"spec": map[string]any{
			"env": []any{map[string]any{"name": "DYN_ROUTER_MODE", "value": "kv"}},
			"components": []any{
				map[string]any{"name": "frontend", "type": "frontend", "replicas": int64(2), "podTemplate": map[string]any{
					"spec": map[string]any{
						"containers": []any{
							map[string]any{"name": "main", "image": "frontend:1", "env": []any{map[string]any{"name": "A", "value": "1"}}},
							map[string]any{"name": "proxy", "image": "proxy:1"},
						},
						"volumes": []any{map[string]any{"name": "models", "emptyDir": map[string]any{}}},
					},
				}},
				map[string]any{"name": "decode", "type": "worker"},
			},
		},
	}
}

// TestCheckGraphWrite: the result of the manager's apply (a dry run's) is
// accepted only when it adds the three entries and changes nothing else;
// an apply a schema turned into a whole-list replacement is refused.
func TestCheckGraphWrite(t *testing.T) {
	read := func(obj map[string]any) *dynamograph.Graph {
		g, err := dynamograph.FromUnstructured(&unstructured.Unstructured{Object: obj})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	before := read(graphObject())
	// merged: what a schema that merges by key makes of the apply.
	merged := func(edit func(tmpl map[string]any)) *unstructured.Unstructured {
		obj := runtime.DeepCopyJSON(graphObject())
		comps := obj["spec"].(map[string]any)["components"].([]any)
		tmpl := comps[0].(map[string]any)["podTemplate"].(map[string]any)["spec"].(map[string]any)
		tmpl["volumes"] = append(tmpl["volumes"].([]any), map[string]any{"name": "kvhint-policy", "configMap": map[string]any{"name": "llama-hints-0123456789abcdef", "defaultMode": int64(420)}})
		main := tmpl["containers"].([]any)[0].(map[string]any)
		main["volumeMounts"] = []any{map[string]any{"name": "kvhint-policy", "mountPath": "/etc/kvhint/policy", "readOnly": true}}
		main["env"] = append(main["env"].([]any), map[string]any{"name": "DYN_ROUTER_POLICY_CONFIG", "value": "/etc/kvhint/policy/hints.yaml"})
		if edit != nil {
			edit(tmpl)
		}
		return &unstructured.Unstructured{Object: obj}
	}
	if err := checkGraphWrite(before, merged(nil), "frontend", "llama-hints-0123456789abcdef", "main"); err != nil {
		t.Errorf("a merge of the three entries: %v", err)
	}
	for name, after := range map[string]*unstructured.Unstructured{
		"containers replaced whole": merged(func(tmpl map[string]any) {
			tmpl["containers"] = tmpl["containers"].([]any)[:1]
		}),
		"env replaced whole": merged(func(tmpl map[string]any) {
			main := tmpl["containers"].([]any)[0].(map[string]any)
			main["env"] = main["env"].([]any)[1:]
		}),
		"another field of the template": merged(func(tmpl map[string]any) { tmpl["hostNetwork"] = true }),
		"another revision than the one applied": merged(func(tmpl map[string]any) {
			vols := tmpl["volumes"].([]any)
			vols[len(vols)-1].(map[string]any)["configMap"] = map[string]any{"name": "llama-hints-ffffffffffffffff"}
		}),
	} {
		if err := checkGraphWrite(before, after, "frontend", "llama-hints-0123456789abcdef", "main"); err == nil || !strings.Contains(err.Error(), "nothing is written") {
			t.Errorf("%s: %v; want a refusal", name, err)
		}
	}
	other := merged(nil)
	other.Object["spec"].(map[string]any)["components"].([]any)[1].(map[string]any)["replicas"] = int64(3)
	if err := checkGraphWrite(before, other, "frontend", "llama-hints-0123456789abcdef", "main"); err == nil || !strings.Contains(err.Error(), "other fields of spec") {
		t.Errorf("another component changed: %v; want a refusal", err)
	}

	// The router moves from the frontend to decode: the apply names
	// decode only, and the API server releases what the manager alone
	// wrote in the frontend. That release is accepted; any other change
	// of the frontend is not.
	moved := func(edit func(front map[string]any)) (*dynamograph.Graph, *unstructured.Unstructured) {
		was := merged(nil)
		obj := runtime.DeepCopyJSON(graphObject())
		comps := obj["spec"].(map[string]any)["components"].([]any)
		comps[1].(map[string]any)["podTemplate"] = map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": "worker:1", "volumeMounts": []any{map[string]any{"name": "kvhint-policy", "mountPath": "/etc/kvhint/policy", "readOnly": true}},
				"env": []any{map[string]any{"name": "DYN_ROUTER_POLICY_CONFIG", "value": "/etc/kvhint/policy/hints.yaml"}}}},
			"volumes": []any{map[string]any{"name": "kvhint-policy", "configMap": map[string]any{"name": "llama-hints-0123456789abcdef"}}},
		}}
		wasComps := was.Object["spec"].(map[string]any)["components"].([]any)
		wasComps[1].(map[string]any)["podTemplate"] = map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": "worker:1"}},
		}}
		if edit != nil {
			edit(comps[0].(map[string]any))
		}
		return read(was.Object), &unstructured.Unstructured{Object: obj}
	}
	if b, a := moved(nil); checkGraphWrite(b, a, "decode", "llama-hints-0123456789abcdef", "main") != nil {
		t.Errorf("the entries released from the former router component: %v", checkGraphWrite(b, a, "decode", "llama-hints-0123456789abcdef", "main"))
	}
	if b, a := moved(func(front map[string]any) { front["replicas"] = int64(5) }); checkGraphWrite(b, a, "decode", "llama-hints-0123456789abcdef", "main") == nil {
		t.Error("the former router component's replicas changed with the release: accepted; want a refusal")
	}
	b, _ := moved(nil)
	if got := entriesElsewhere(b, "decode"); len(got) != 1 || !strings.Contains(got[0], `component "frontend": volume kvhint-policy, the mount at /etc/kvhint/policy in container main, env DYN_ROUTER_POLICY_CONFIG in container main`) {
		t.Errorf("entries elsewhere: %q", got)
	}
}
