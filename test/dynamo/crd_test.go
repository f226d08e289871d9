package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// TestCRDRefuses holds the API server to the CRD's rules from Dynamo's
// schema: graphs that break them are refused with Dynamo's message.
func TestCRDRefuses(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	for _, tc := range []struct {
		name   string
		change func(*v1beta1.DynamoGraphDeployment)
		want   string
	}{
		{"two epp components", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[0].ComponentType = v1beta1.ComponentTypeEPP
			g.Spec.Components[1].ComponentType = v1beta1.ComponentTypeEPP
		}, "at most one component may have type epp"},
		{"names equal but for case", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[1].ComponentName = "Frontend"
		}, "component names must be unique case-insensitively"},
		{"a type outside the enum", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[1].ComponentType = "router"
		}, `Unsupported value: "router"`},
		{"a name that is no DNS label", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[1].ComponentName = "worker_1"
		}, "should match"},
		{"negative replicas", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[0].Replicas = new(int32(-1))
		}, "should be greater than or equal to 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := dynamo.FrontendGraph(ns, "refused", 1)
			tc.change(g)
			err := k8s.Create(context.Background(), g)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want Invalid with %q", err, tc.want)
			}
		})
	}

}

// TestCRDComponentChanges holds updates to Dynamo's rules: a component's
// type may change (Dynamo has no immutability rule for it), while adding,
// removing or renaming a component is refused, as Dynamo's webhook refuses
// it; podTemplate.metadata is kept.
func TestCRDComponentChanges(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*v1beta1.DynamoGraphDeployment)
		want   string // empty: accepted
	}{
		{"a type change", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[1].ComponentType = v1beta1.ComponentTypePrefill
		}, ""},
		{"a replica change", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[1].Replicas = new(int32(4))
		}, ""},
		{"a component added", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components = append(g.Spec.Components, v1beta1.DynamoComponentDeploymentSharedSpec{ComponentName: "decode", ComponentType: v1beta1.ComponentTypeDecode})
		}, "components cannot be added or removed after creation"},
		{"a component removed", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components = g.Spec.Components[:1]
		}, "components cannot be added or removed after creation"},
		{"a component renamed", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[1].ComponentName = "worker2"
		}, "components cannot be added or removed after creation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := dynamo.FrontendGraph(ns, "changed-"+strings.ReplaceAll(tc.name, " ", "-"), 1)
			g.Spec.Components[1].PodTemplate.Labels = map[string]string{"team": "serving"}
			if err := k8s.Create(ctx, g); err != nil {
				t.Fatal(err)
			}
			tc.change(g)
			err := k8s.Update(ctx, g)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("update refused: %v", err)
				}
				got := &v1beta1.DynamoGraphDeployment{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(g.Spec.Components, got.Spec.Components); d != "" {
					t.Errorf("components (-sent +stored):\n%s", d)
				}
				if got.Spec.Components[1].PodTemplate.Labels["team"] != "serving" {
					t.Errorf("podTemplate.metadata.labels %v: pruned", got.Spec.Components[1].PodTemplate.Labels)
				}
				return
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update: %v, want Invalid with %q", err, tc.want)
			}
		})
	}
}

// TestCRDMergesPodTemplateListsByKey is what the manager relies on: the
// podTemplate's containers, volumes, mounts and env are list maps, so a
// server-side apply by one field manager adds entries beside another's,
// and a forced re-apply of the owner's manifest (Flux's way) leaves them.
func TestCRDMergesPodTemplateListsByKey(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	ctx := context.Background()
	manifest := func() *unstructured.Unstructured {
		g := dynamo.FrontendGraph(ns, "merge", 2)
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		unstructured.RemoveNestedField(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		return u
	}
	apply := func(u *unstructured.Unstructured, owner string) {
		t.Helper()
		if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
			t.Fatalf("apply as %s: %v", owner, err)
		}
	}
	apply(manifest(), "gitops")

	// The three entries, and only them, as another field manager.
	hints := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
		"metadata": map[string]any{"name": "merge", "namespace": ns},
		"spec": map[string]any{"components": []any{map[string]any{
			"name": "frontend",
			"podTemplate": map[string]any{"spec": map[string]any{
				"volumes": []any{map[string]any{"name": "merge-hints-1", "configMap": map[string]any{"name": "merge-hints-1"}}},
				"containers": []any{map[string]any{
					"name":         "main",
					"volumeMounts": []any{map[string]any{"name": "merge-hints-1", "mountPath": "/etc/kvhint", "readOnly": true}},
					"env":          []any{map[string]any{"name": "DYN_ROUTER_POLICY_CONFIG", "value": "/etc/kvhint/hints.yaml"}},
				}},
			}},
		}}},
	}}
	apply(hints, "kvhint")

	check := func(when string) {
		t.Helper()
		g := &v1beta1.DynamoGraphDeployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "merge"}, g); err != nil {
			t.Fatal(err)
		}
		if len(g.Spec.Components) != 2 {
			t.Fatalf("%s: %d components, want 2", when, len(g.Spec.Components))
		}
		tmpl := g.Component("frontend").PodTemplate
		main := tmpl.Spec.Containers[0]
		if main.Image != dynamo.FrontendImage || len(tmpl.Spec.Containers) != 1 {
			t.Errorf("%s: containers %+v, want main with its image", when, tmpl.Spec.Containers)
		}
		wantEnv := []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}, {Name: "DYN_ROUTER_POLICY_CONFIG", Value: "/etc/kvhint/hints.yaml"}}
		if d := cmp.Diff(wantEnv, main.Env); d != "" {
			t.Errorf("%s: env (-want +got):\n%s", when, d)
		}
		if len(main.VolumeMounts) != 1 || main.VolumeMounts[0].Name != "merge-hints-1" {
			t.Errorf("%s: mounts %+v, want merge-hints-1", when, main.VolumeMounts)
		}
		if len(tmpl.Spec.Volumes) != 1 || tmpl.Spec.Volumes[0].Name != "merge-hints-1" {
			t.Errorf("%s: volumes %+v, want merge-hints-1", when, tmpl.Spec.Volumes)
		}
		if *g.Component("frontend").Replicas != 2 {
			t.Errorf("%s: replicas %d, want 2", when, *g.Component("frontend").Replicas)
		}
	}
	check("after the second field manager's apply")
	g := &v1beta1.DynamoGraphDeployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "merge"}, g); err != nil {
		t.Fatal(err)
	}
	gen := g.Generation
	apply(manifest(), "gitops")
	check("after the owner's forced re-apply")
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "merge"}, g); err != nil {
		t.Fatal(err)
	}
	if g.Generation != gen {
		t.Errorf("the unchanged re-apply moved the generation from %d to %d", gen, g.Generation)
	}

	// The stand-in renders the merged template.
	dep := waitDeployment(t, ns, "merge-frontend")
	testenv.Eventually(t, timeout, "the volume rendered", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if n := len(dep.Spec.Template.Spec.Volumes); n != 1 {
			return fmt.Errorf("%d volumes", n)
		}
		return nil
	})
}
