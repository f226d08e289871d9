package rolegraph

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// frontendGraph is an opted-in DGD of router llama, rendered as
// Deployments, with a frontend component of 2 replicas whose Frontend
// runs in KV mode by spec.env, and a worker; its status says generation
// 1 rolled out.
func frontendGraph() *dynamograph.Graph {
	ready := int32(2)
	return &dynamograph.Graph{
		ObjectMeta: metav1.ObjectMeta{
			Name: "llama", Generation: 1,
			Labels:      map[string]string{v1alpha1.RouterLabel: "llama"},
			Annotations: map[string]string{v1alpha1.RouterComponentAnnotation: "", dynamograph.EnableGroveAnnotation: "false"},
		},
		Spec: dynamograph.Spec{
			Env: []corev1.EnvVar{{Name: RouterModeEnv, Value: "kv"}},
			Components: []dynamograph.Component{
				{Name: "frontend", Type: "frontend", Replicas: new(int32(2)), PodTemplate: &corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.RouterLabel: "llama"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "frontend"}}},
				}},
				{Name: "decode", Type: "worker", PodTemplate: &corev1.PodTemplateSpec{
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "vllm"}}},
				}},
			},
		},
		Status: dynamograph.Status{
			ObservedGeneration: 1, State: dynamograph.StateSuccessful,
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "all_resources_are_ready"}},
			Components: map[string]dynamograph.ComponentStatus{"frontend": {Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: &ready}},
		},
	}
}

// TestReadGraph: the router component is found and its template checked
// as Dynamo's operator renders it; every pre-flight refusal names its
// reason and the fix.
func TestReadGraph(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	frontend := func(g *dynamograph.Graph) *dynamograph.Component { return g.Component("frontend") }
	cases := []struct {
		name    string
		edit    func(g *dynamograph.Graph)
		blocked v1alpha1.ConditionReason
		notRead string
		check   func(t *testing.T, w *Workload)
	}{
		{name: "frontend found by type, mode from spec.env", check: func(t *testing.T, w *Workload) {
			if !w.Writable || w.Component != "frontend" || w.Container != "main" || w.Mode != hintsconfig.ModeKV || w.Replicas != 2 {
				t.Errorf("got writable %v component %q container %q mode %q replicas %d", w.Writable, w.Component, w.Container, w.Mode, w.Replicas)
			}
			if w.Unsettled != "" || w.RolloutFailed != "" || len(w.Warnings) != 0 {
				t.Errorf("settled graph: unsettled %q failed %q warnings %q", w.Unsettled, w.RolloutFailed, w.Warnings)
			}
		}},
		{name: "the container's own mode wins over spec.env", edit: func(g *dynamograph.Graph) {
			frontend(g).PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: RouterModeEnv, Value: "round-robin"}}
		}, check: func(t *testing.T, w *Workload) {
			if w.Mode != hintsconfig.ModeRoundRobin {
				t.Errorf("mode %q, want round-robin", w.Mode)
			}
		}},
		{name: "named component of no router type", edit: func(g *dynamograph.Graph) {
			g.Annotations[v1alpha1.RouterComponentAnnotation] = "decode"
		}, blocked: v1alpha1.ReasonInvalidRouterWorkload, notRead: `names component "decode" of type "worker", which runs no router`},
		{name: "named component missing", edit: func(g *dynamograph.Graph) {
			g.Annotations[v1alpha1.RouterComponentAnnotation] = "Frontend"
		}, blocked: v1alpha1.ReasonInvalidRouterWorkload, notRead: `no component of that name (components: frontend, decode)`},
		{name: "no podTemplate", edit: func(g *dynamograph.Graph) { frontend(g).PodTemplate = nil },
			blocked: v1alpha1.ReasonInvalidRouterWorkload, notRead: "has no podTemplate"},
		{name: "pods without the router label", edit: func(g *dynamograph.Graph) { frontend(g).PodTemplate.Labels = nil },
			blocked: v1alpha1.ReasonInvalidRouterWorkload, notRead: `podTemplate.metadata.labels has hints.kvrouter.io/router="", not "llama"`},
		{name: "a user-set policy path", edit: func(g *dynamograph.Graph) {
			g.Spec.Env = append(g.Spec.Env, corev1.EnvVar{Name: RouterPolicyConfigEnv, Value: "/opt/mine.yaml"})
		}, blocked: v1alpha1.ReasonPolicyFileNotRead, notRead: "sets DYN_ROUTER_POLICY_CONFIG to /opt/mine.yaml"},
		{name: "an EPP without its batched-token limit", edit: func(g *dynamograph.Graph) { frontend(g).Type = dynamograph.TypeEPP },
			blocked: v1alpha1.ReasonRouterWouldNotStart, notRead: "needs DYN_EPP_MAX_NUM_BATCHED_TOKENS"},
		{name: "an EPP with it in spec.env", edit: func(g *dynamograph.Graph) {
			frontend(g).Type = dynamograph.TypeEPP
			g.Spec.Env = append(g.Spec.Env, corev1.EnvVar{Name: dynamograph.EPPMaxBatchedTokensEnv, Value: "8192"})
		}, check: func(t *testing.T, w *Workload) {
			if !w.Writable {
				t.Errorf("not writable: %s", w.NotRead)
			}
		}},
		{name: "Grove OnDelete", edit: func(g *dynamograph.Graph) {
			delete(g.Annotations, dynamograph.EnableGroveAnnotation)
			g.Annotations[dynamograph.GroveUpdateStrategyAnnotation] = "OnDelete"
		}, blocked: v1alpha1.ReasonUpdateStrategyOnDelete, notRead: "take a new template only when they are deleted"},
		{name: "OnDelete does nothing to Deployments", edit: func(g *dynamograph.Graph) {
			g.Annotations[dynamograph.GroveUpdateStrategyAnnotation] = "OnDelete"
		}, check: func(t *testing.T, w *Workload) {
			if !w.Writable {
				t.Errorf("not writable: %s", w.NotRead)
			}
		}},
		{name: "one replica on Grove warns", edit: func(g *dynamograph.Graph) {
			delete(g.Annotations, dynamograph.EnableGroveAnnotation)
			frontend(g).Replicas = new(int32(1))
		}, check: func(t *testing.T, w *Workload) {
			if !w.Writable || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], "gap in serving") {
				t.Errorf("writable %v warnings %q", w.Writable, w.Warnings)
			}
		}},
		{name: "a worker's frontendSidecar warns that workers roll", edit: func(g *dynamograph.Graph) {
			g.Spec.Components = g.Spec.Components[1:]
			side := "frontend"
			g.Spec.Components[0].FrontendSidecar = &side
			g.Spec.Components[0].PodTemplate.Labels = map[string]string{v1alpha1.RouterLabel: "llama"}
			g.Spec.Components[0].PodTemplate.Spec.Containers = append(g.Spec.Components[0].PodTemplate.Spec.Containers, corev1.Container{Name: "frontend"})
		}, check: func(t *testing.T, w *Workload) {
			if !w.Writable || w.Component != "decode" || w.Container != "frontend" || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], "its workers with it") {
				t.Errorf("writable %v component %q container %q warnings %q (%s)", w.Writable, w.Component, w.Container, w.Warnings, w.NotRead)
			}
		}},
		{name: "generation not observed", edit: func(g *dynamograph.Graph) { g.Generation = 2 }, check: func(t *testing.T, w *Workload) {
			if !strings.Contains(w.Unsettled, "has not yet reconciled generation 2") {
				t.Errorf("unsettled %q", w.Unsettled)
			}
		}},
		{name: "component rolling", edit: func(g *dynamograph.Graph) {
			g.Status.Conditions[0].Status, g.Status.Conditions[0].Reason = metav1.ConditionFalse, "updating"
			g.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-time.Minute))
			cs := g.Status.Components["frontend"]
			cs.UpdatedReplicas = 1
			g.Status.Components["frontend"] = cs
		}, check: func(t *testing.T, w *Workload) {
			if !strings.Contains(w.Unsettled, `component "frontend" has 1 updated and 2 ready of 2 replicas`) || w.RolloutFailed != "" ||
				!w.RecheckAt.Equal(now.Add(-time.Minute).Add(GraphProgressDeadline)) {
				t.Errorf("unsettled %q failed %q recheck %v", w.Unsettled, w.RolloutFailed, w.RecheckAt)
			}
		}},
		{name: "no progress past the deadline", edit: func(g *dynamograph.Graph) {
			g.Status.Conditions[0].Status, g.Status.Conditions[0].Reason = metav1.ConditionFalse, "pods_not_ready"
			g.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-GraphProgressDeadline))
		}, check: func(t *testing.T, w *Workload) {
			if !strings.Contains(w.RolloutFailed, "no progress in 10m0s") {
				t.Errorf("failed %q", w.RolloutFailed)
			}
		}},
		{name: "Dynamo reports failure", edit: func(g *dynamograph.Graph) { g.Status.State = dynamograph.StateFailed }, check: func(t *testing.T, w *Workload) {
			if !strings.Contains(w.RolloutFailed, "reports state failed") {
				t.Errorf("failed %q", w.RolloutFailed)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := frontendGraph()
			if tc.edit != nil {
				tc.edit(g)
			}
			w := ReadGraph(g, now)
			if tc.notRead != "" {
				if w.Writable || w.Blocked != tc.blocked || !strings.Contains(w.NotRead, tc.notRead) {
					t.Errorf("writable %v, blocked %q, not read %q; want %q containing %q", w.Writable, w.Blocked, w.NotRead, tc.blocked, tc.notRead)
				}
				f := PolicyFileFinding([]*Workload{w})
				if f == nil || f.Reason != tc.blocked || f.Detail != "DynamoGraphDeployment llama" {
					t.Errorf("finding %+v", f)
				}
				return
			}
			if tc.check != nil {
				tc.check(t, w)
			}
		})
	}
}
