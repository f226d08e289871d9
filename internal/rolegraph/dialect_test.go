package rolegraph

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// TestDialectChoice: the role's annotation wins, then the router's
// declared catalog's dynamoVersion, then the DGD component's
// runtimeVersion, then the Frontend image's tag, else 1.6.
func TestDialectChoice(t *testing.T) {
	graph := func(runtimeVersion, image string) *Workload {
		g := &dynamograph.Graph{ObjectMeta: metav1.ObjectMeta{Name: "g", Labels: map[string]string{v1alpha1.RouterLabel: "llama"}},
			Spec: dynamograph.Spec{Components: []dynamograph.Component{{Name: "Frontend", Type: dynamograph.TypeFrontend, RuntimeVersion: runtimeVersion,
				PodTemplate: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: dynamograph.MainContainer, Image: image}}}}}}}}
		return ReadGraph(g, metav1.Now().Time)
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		declared    string
		wl          *Workload
		want, from  string
		err         string
	}{
		{"nothing says", nil, "", nil, "1.6", "the default", ""},
		{"a Deployment's image tag", nil, "", ReadWorkload(routerDeployment(corev1.Container{Image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0"})), "1.7", "image tag", ""},
		{"an untagged image", nil, "", ReadWorkload(routerDeployment(corev1.Container{Image: "registry:5000/dynamo@sha256:abc"})), "1.6", "the default", ""},
		{"a tag that is no version", nil, "", ReadWorkload(routerDeployment(corev1.Container{Image: "dynamo:latest"})), "1.6", "the default", ""},
		{"a newer line reads as the newest known", nil, "", ReadWorkload(routerDeployment(corev1.Container{Image: "dynamo:v1.8.2"})), "1.7", "image tag", ""},
		{"an older line reads as the oldest known", nil, "", ReadWorkload(routerDeployment(corev1.Container{Image: "dynamo:1.5.0"})), "1.6", "image tag", ""},
		{"runtimeVersion over the image tag", nil, "", graph("1.7.1", "vllm-runtime:1.6.0"), "1.7", "runtimeVersion", ""},
		{"the DGD image tag without runtimeVersion", nil, "", graph("", "vllm-runtime:1.7.0"), "1.7", "image tag", ""},
		{"the role's annotation over the workload", map[string]string{v1alpha1.DynamoVersionAnnotation: "1.6"}, "", graph("1.7.0", ""), "1.6", "annotation", ""},
		{"the declared catalog over runtimeVersion", nil, "1.7", graph("1.6.0", "vllm-runtime:1.6.0"), "1.7", "the declared catalog's dynamoVersion 1.7", ""},
		{"the declared catalog where the workload says nothing", nil, "1.7.0", nil, "1.7", "dynamoVersion 1.7.0", ""},
		{"the role's annotation over the declared catalog", map[string]string{v1alpha1.DynamoVersionAnnotation: "1.6"}, "1.7", graph("1.7.0", ""), "1.6", "annotation", ""},
		{"a bad annotation", map[string]string{v1alpha1.DynamoVersionAnnotation: "seven"}, "", nil, "", "", `annotation hints.kvrouter.io/dynamo-version is "seven"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, from, err := DialectOf(tc.annotations, tc.declared, tc.wl)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || d.Version != tc.want || !strings.Contains(from, tc.from) {
				t.Errorf("dialect %s from %q (err %v), want %s from %q", d.Version, from, err, tc.want, tc.from)
			}
		})
	}
}

// TestPresetOverridesParameters: a 1.7 Frontend that sets a preset (flag
// or variable) makes every KV role on the default cost function Accepted
// with reason PresetOverridesParameters; under 1.6, which has no
// presets, or on another selection, nothing is said.
func TestPresetOverridesParameters(t *testing.T) {
	cat := builtin.NewCatalog()
	for _, tc := range []struct {
		name      string
		frontend  corev1.Container
		selection string
		want      v1alpha1.ConditionReason
		message   string
	}{
		{"--agentic on 1.7", corev1.Container{Image: "vllm-runtime:1.7.0", Args: []string{"--router-mode", "kv", "--agentic"}}, "dynamo-default-cost-fn",
			v1alpha1.ReasonPresetOverridesParameters, "PresetOverridesParameters: --agentic of container \"frontend\" of Deployment llama: a Dynamo 1.7 router preset"},
		{"DYN_ROUTER_LOAD_AWARE on 1.7", corev1.Container{Image: "vllm-runtime:1.7.0", Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}, {Name: "DYN_ROUTER_LOAD_AWARE", Value: "true"}}},
			"dynamo-default-cost-fn", v1alpha1.ReasonPresetOverridesParameters, "overlap_score_credit 0"},
		{"DYN_ROUTER_AGENTIC=false", corev1.Container{Image: "vllm-runtime:1.7.0", Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}, {Name: "DYN_ROUTER_AGENTIC", Value: "false"}}},
			"dynamo-default-cost-fn", v1alpha1.ReasonAccepted, ""},
		{"--agentic on 1.6", corev1.Container{Image: "vllm-runtime:1.6.2", Args: []string{"--router-mode", "kv", "--agentic"}}, "dynamo-default-cost-fn", v1alpha1.ReasonAccepted, ""},
		{"--agentic alone implies kv mode", corev1.Container{Image: "vllm-runtime:1.7.0", Args: []string{"--agentic"}}, "dynamo-default-cost-fn",
			v1alpha1.ReasonPresetOverridesParameters, "PresetOverridesParameters: --agentic of container \"frontend\" of Deployment llama: a Dynamo 1.7 router preset"},
		{"another selection", corev1.Container{Image: "vllm-runtime:1.7.0", Args: []string{"--router-mode", "kv", "--agentic"}}, "dynamo-soft-affinity-load-guard", v1alpha1.ReasonAccepted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Name: "decode", Namespace: "ns", Generation: 1},
				Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: "decode", WorkerSelection: v1alpha1.WorkerSelection{Type: tc.selection}}}
			out := Compile(cat, Input{RouterRoles: []v1alpha1.RouterRole{rr}, Deployments: []appsv1.Deployment{*routerDeployment(tc.frontend)}})
			c := conditionOf(out.RouterRole("decode").Status.Conditions, v1alpha1.ConditionAccepted)
			if diff := cmp.Diff([]string{"True", string(tc.want)}, []string{string(c.Status), c.Reason}); diff != "" {
				t.Errorf("Accepted (-want +got):\n%s\n%s", diff, c.Message)
			}
			if !strings.Contains(c.Message, tc.message) {
				t.Errorf("message %q lacks %q", c.Message, tc.message)
			}
		})
	}
}

func conditionOf(cs []metav1.Condition, t v1alpha1.ConditionType) metav1.Condition {
	for _, c := range cs {
		if c.Type == string(t) {
			return c
		}
	}
	return metav1.Condition{}
}

// TestDeclaredDynamoVersion: the dynamoVersion a router's declared
// catalog states picks the dialect over the Frontend image's tag, so
// that a preset the Frontend sets is reported on a 1.6-tagged image the
// catalog says runs 1.7, and not on a 1.7-tagged one it says runs 1.6;
// the role's annotation still wins over the catalog.
func TestDeclaredDynamoVersion(t *testing.T) {
	cat := builtin.NewCatalog()
	agentic := func(image string) corev1.Container {
		return corev1.Container{Image: image, Args: []string{"--router-mode", "kv", "--agentic"}}
	}
	for _, tc := range []struct {
		name        string
		declared    string
		annotations map[string]string
		frontend    corev1.Container
		want        v1alpha1.ConditionReason
		message     string
	}{
		{"catalog 1.7 over a 1.6 tag", "1.7", nil, agentic("vllm-runtime:1.6.2"), v1alpha1.ReasonPresetOverridesParameters,
			"Dynamo 1.7 from the declared catalog's dynamoVersion 1.7"},
		{"catalog 1.6 over a 1.7 tag", "1.6.1", nil, agentic("vllm-runtime:1.7.0"), v1alpha1.ReasonAccepted, ""},
		{"no catalog version: the tag", "", nil, agentic("vllm-runtime:1.7.0"), v1alpha1.ReasonPresetOverridesParameters, "image tag"},
		{"the annotation over the catalog", "1.6", map[string]string{v1alpha1.DynamoVersionAnnotation: "1.7"}, agentic("vllm-runtime:1.6.2"),
			v1alpha1.ReasonPresetOverridesParameters, "annotation hints.kvrouter.io/dynamo-version 1.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Name: "decode", Namespace: "ns", Generation: 1, Annotations: tc.annotations},
				Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: "decode", WorkerSelection: v1alpha1.WorkerSelection{Type: "dynamo-default-cost-fn"}}}
			out := Compile(cat, Input{RouterRoles: []v1alpha1.RouterRole{rr}, Deployments: []appsv1.Deployment{*routerDeployment(tc.frontend)},
				DynamoVersions: map[string]string{"llama": tc.declared}})
			c := conditionOf(out.RouterRole("decode").Status.Conditions, v1alpha1.ConditionAccepted)
			if diff := cmp.Diff([]string{"True", string(tc.want)}, []string{string(c.Status), c.Reason}); diff != "" {
				t.Errorf("Accepted (-want +got):\n%s\n%s", diff, c.Message)
			}
			if !strings.Contains(c.Message, tc.message) {
				t.Errorf("message %q lacks %q", c.Message, tc.message)
			}
		})
	}
}
