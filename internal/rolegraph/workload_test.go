package rolegraph

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// routerDeployment is an opted-in router Deployment whose container is c,
// mounting volume "policy" (ConfigMap llama-hints) at /etc/router.
func routerDeployment(c corev1.Container) *appsv1.Deployment {
	c.Name = "frontend"
	if c.VolumeMounts == nil {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "policy", MountPath: "/etc/router"}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "llama",
			Labels:      map[string]string{v1alpha1.RouterLabel: "llama"},
			Annotations: map[string]string{v1alpha1.PolicyVolumeAnnotation: "policy"},
		},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "policy", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "llama-hints"}},
			}}},
		}}},
	}
}

func TestReadWorkload(t *testing.T) {
	const file = "--router-policy-config=/etc/router/hints.yaml"
	for _, tc := range []struct {
		name      string
		container corev1.Container
		mode      hintsconfig.RouterMode
		origin    string // in ModeOrigin
		notRead   string // in NotRead; empty: the file is read
	}{
		{name: "flags", container: corev1.Container{Args: []string{"--router-mode", "kv", file}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "flag with =", container: corev1.Container{Args: []string{"--router-mode=kv", file}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "shell command line", container: corev1.Container{Command: []string{"sh", "-c", "exec python -m dynamo.frontend --router-mode kv --router-policy-config /etc/router/hints.yaml"}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "env", container: corev1.Container{Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}, {Name: "DYN_ROUTER_POLICY_CONFIG", Value: "/etc/router/hints.yaml"}}}, mode: hintsconfig.ModeKV, origin: "DYN_ROUTER_MODE"},
		{name: "flag wins over env", container: corev1.Container{Args: []string{"--router-mode", "random", file}, Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}}}, mode: hintsconfig.ModeRandom, origin: "--router-mode"},
		{name: "the last flag wins", container: corev1.Container{Args: []string{"--router-mode", "kv", "--router-mode", "direct", file}}, mode: hintsconfig.ModeDirect, origin: "--router-mode"},
		{name: "no mode: Dynamo's default", container: corev1.Container{Args: []string{file}}, mode: hintsconfig.ModeRoundRobin, origin: "the default router mode"},
		{name: "no policy file", container: corev1.Container{Args: []string{"--router-mode", "kv"}}, mode: hintsconfig.ModeKV, origin: "--router-mode",
			notRead: "sets neither --router-policy-config nor DYN_ROUTER_POLICY_CONFIG"},
		{name: "another file", container: corev1.Container{Args: []string{"--router-mode", "kv", "--router-policy-config", "/etc/other/hints.yaml"}}, mode: hintsconfig.ModeKV, origin: "--router-mode",
			notRead: `--router-policy-config is "/etc/other/hints.yaml", but the policy file is mounted at /etc/router/hints.yaml`},
		{name: "subPath mount", container: corev1.Container{
			Args:         []string{"--router-mode", "kv", "--router-policy-config", "/etc/policy.yaml"},
			VolumeMounts: []corev1.VolumeMount{{Name: "policy", MountPath: "/etc/policy.yaml", SubPath: "hints.yaml"}},
		}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "not mounted", container: corev1.Container{Args: []string{"--router-mode", "kv", file}, VolumeMounts: []corev1.VolumeMount{}},
			mode: hintsconfig.ModeRoundRobin, origin: "the default router mode", notRead: `no container mounts volume "policy"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ReadWorkload(routerDeployment(tc.container))
			if w.Mode != tc.mode || !strings.Contains(w.ModeOrigin, tc.origin) {
				t.Errorf("mode %q from %q, want %q from %q", w.Mode, w.ModeOrigin, tc.mode, tc.origin)
			}
			switch {
			case tc.notRead == "" && w.NotRead != "":
				t.Errorf("NotRead %q, want the file read", w.NotRead)
			case tc.notRead != "" && !strings.Contains(w.NotRead, tc.notRead):
				t.Errorf("NotRead %q, want it to say %q", w.NotRead, tc.notRead)
			}
		})
	}
}

func TestReadWorkloadVolume(t *testing.T) {
	d := routerDeployment(corev1.Container{Args: []string{"--router-mode", "kv", "--router-policy-config", "/etc/router/hints.yaml"}})
	if w := ReadWorkload(d); !w.Writable || w.References != "llama-hints" || w.Container != "frontend" {
		t.Errorf("got writable %v, references %q, container %q", w.Writable, w.References, w.Container)
	}
	d.Spec.Template.Spec.Volumes[0].ConfigMap = nil
	d.Spec.Template.Spec.Volumes[0].EmptyDir = &corev1.EmptyDirVolumeSource{}
	if w := ReadWorkload(d); w.Writable || !strings.Contains(w.NotRead, "not a configMap volume") {
		t.Errorf("an emptyDir volume: writable %v, NotRead %q", w.Writable, w.NotRead)
	}
	d.Annotations[v1alpha1.PolicyVolumeAnnotation] = "missing"
	if w := ReadWorkload(d); w.Writable || !strings.Contains(w.NotRead, `no volume of that name`) {
		t.Errorf("a volume that is not there: writable %v, NotRead %q", w.Writable, w.NotRead)
	}
}

func TestStaleRevisions(t *testing.T) {
	rev := func(hash string) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name:   v1alpha1.RevisionConfigMapName("llama", hash),
			Labels: map[string]string{v1alpha1.RouterLabel: "llama", v1alpha1.ManagedByLabel: v1alpha1.ManagedBy, v1alpha1.ConfigHashLabel: hash},
		}}
	}
	mounting := func(cm string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "policy", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}},
		}}}}}
	}
	notOurs := rev("dddddddddddddddd")
	delete(notOurs.Labels, v1alpha1.ManagedByLabel)
	revs := []corev1.ConfigMap{rev("aaaaaaaaaaaaaaaa"), rev("bbbbbbbbbbbbbbbb"), rev("cccccccccccccccc"), notOurs}
	dep := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: appsv1.DeploymentStatus{ObservedGeneration: 3}}
	dep.Spec.Template = mounting("llama-hints-cccccccccccccccc")
	rss := []appsv1.ReplicaSet{{Spec: appsv1.ReplicaSetSpec{Template: mounting("llama-hints-bbbbbbbbbbbbbbbb")}}}

	got := StaleRevisions("llama", "cccccccccccccccc", revs, []appsv1.Deployment{dep}, rss, nil)
	var names []string
	for _, cm := range got {
		names = append(names, cm.Name)
	}
	// b is a ReplicaSet's (rollout undo returns to it), c the current
	// one, d not the manager's: only a goes.
	if diff := cmp.Diff([]string{"llama-hints-aaaaaaaaaaaaaaaa"}, names); diff != "" {
		t.Errorf("stale revisions (-want +got):\n%s", diff)
	}

	dep.Generation = 4
	if got := StaleRevisions("llama", "cccccccccccccccc", revs, []appsv1.Deployment{dep}, rss, nil); len(got) != 0 {
		t.Errorf("with a template the Deployment controller has not seen, nothing may go; got %d", len(got))
	}
}
