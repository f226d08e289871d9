package dynamo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// TestRenderMainContainer covers the defaults RenderDeployment puts in a
// component's main container: the graph's env before the component's,
// each name once with the component's value, and a frontend's command.
func TestRenderMainContainer(t *testing.T) {
	env := func(kv ...string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for i := 0; i < len(kv); i += 2 {
			out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name              string
		typ               v1beta1.ComponentType
		graphEnv, ownEnv  []corev1.EnvVar
		command, args     []string
		wantEnv           []corev1.EnvVar
		wantCmd, wantArgs []string
	}{
		{name: "frontend defaults", typ: v1beta1.ComponentTypeFrontend,
			wantCmd: []string{"python3"}, wantArgs: []string{"-m", "dynamo.frontend"}},
		{name: "frontend with its own args", typ: v1beta1.ComponentTypeFrontend, args: []string{"-m", "dynamo.frontend", "--router-mode", "kv"},
			wantCmd: []string{"python3"}, wantArgs: []string{"-m", "dynamo.frontend", "--router-mode", "kv"}},
		{name: "frontend with its own command", typ: v1beta1.ComponentTypeFrontend, command: []string{"/bin/frontend"},
			wantCmd: []string{"/bin/frontend"}},
		{name: "worker: no command", typ: v1beta1.ComponentTypeWorker},
		{name: "graph env first, the component's value wins", typ: v1beta1.ComponentTypeWorker,
			graphEnv: env("A", "graph", "B", "graph", "A", "again"), ownEnv: env("B", "own", "C", "own"),
			wantEnv: env("A", "graph", "B", "own", "C", "own")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dgd := &v1beta1.DynamoGraphDeployment{}
			dgd.Name, dgd.Namespace = "g", "ns"
			dgd.Spec.Env = tc.graphEnv
			comp := &v1beta1.DynamoComponentDeploymentSharedSpec{
				ComponentName: "Comp", ComponentType: tc.typ,
				PodTemplate: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "sidecar", Image: "s"},
					{Name: "main", Image: "m", Env: tc.ownEnv, Command: tc.command, Args: tc.args},
				}}},
			}
			dep := RenderDeployment(dgd, comp)
			// A worker's name ends in the graph's worker hash.
			wantName := "g-comp"
			if IsWorker(tc.typ) {
				wantName += "-" + WorkerHash(dgd)
			}
			if dep.Name != wantName || *dep.Spec.Replicas != 1 {
				t.Errorf("name %q replicas %d, want %s 1", dep.Name, *dep.Spec.Replicas, wantName)
			}
			side, main := dep.Spec.Template.Spec.Containers[0], dep.Spec.Template.Spec.Containers[1]
			if len(side.Command) != 0 || len(side.Env) != 0 {
				t.Errorf("the sidecar got defaults: %+v", side)
			}
			if d := cmp.Diff(tc.wantEnv, main.Env); d != "" {
				t.Errorf("env (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantCmd, main.Command); d != "" {
				t.Errorf("command (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantArgs, main.Args); d != "" {
				t.Errorf("args (-want +got):\n%s", d)
			}
			if own := comp.PodTemplate.Spec.Containers[1]; !cmp.Equal(own.Command, tc.command) || !cmp.Equal(own.Env, tc.ownEnv) {
				t.Errorf("rendering changed the graph's own template")
			}
		})
	}
}
