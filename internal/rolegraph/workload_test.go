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

// routerDeployment is a router Deployment opted in with
// RouterContainerAnnotation whose router container is c, named
// "frontend".
func routerDeployment(c corev1.Container) *appsv1.Deployment {
	c.Name = "frontend"
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "llama",
			Labels:      map[string]string{v1alpha1.RouterLabel: "llama"},
			Annotations: map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"},
		},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sidecar"}, c},
		}}},
	}
}

func TestReadWorkload(t *testing.T) {
	ours := corev1.EnvVar{Name: "DYN_ROUTER_POLICY_CONFIG", Value: v1alpha1.PolicyFilePath}
	for _, tc := range []struct {
		name      string
		container corev1.Container
		mode      hintsconfig.RouterMode
		origin    string // in ModeOrigin
		notRead   string // in NotRead; empty: the file is read
	}{
		{name: "flags", container: corev1.Container{Args: []string{"--router-mode", "kv"}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "flag with =", container: corev1.Container{Args: []string{"--router-mode=kv"}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "shell command line", container: corev1.Container{Command: []string{"sh", "-c", "exec python -m dynamo.frontend --router-mode kv"}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "env", container: corev1.Container{Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}}}, mode: hintsconfig.ModeKV, origin: "DYN_ROUTER_MODE"},
		{name: "flag wins over env", container: corev1.Container{Args: []string{"--router-mode", "random"}, Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}}}, mode: hintsconfig.ModeRandom, origin: "--router-mode"},
		{name: "the last flag wins", container: corev1.Container{Args: []string{"--router-mode", "kv", "--router-mode", "direct"}}, mode: hintsconfig.ModeDirect, origin: "--router-mode"},
		{name: "no mode: Dynamo's default", container: corev1.Container{}, mode: hintsconfig.ModeRoundRobin, origin: "the default router mode"},
		{name: "the manager's own variable", container: corev1.Container{Args: []string{"--router-mode", "kv"}, Env: []corev1.EnvVar{ours}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "the flag naming the manager's file", container: corev1.Container{Args: []string{"--router-mode", "kv", "--router-policy-config", v1alpha1.PolicyFilePath}}, mode: hintsconfig.ModeKV, origin: "--router-mode"},
		{name: "a user-set flag", container: corev1.Container{Args: []string{"--router-mode", "kv", "--router-policy-config", "/etc/other/hints.yaml"}, Env: []corev1.EnvVar{ours}}, mode: hintsconfig.ModeKV, origin: "--router-mode",
			notRead: `container "frontend" of Deployment llama sets --router-policy-config to /etc/other/hints.yaml: the router would read that file, not the compiled config the manager mounts at /etc/kvhint/policy/hints.yaml`},
		{name: "a user-set variable", container: corev1.Container{Args: []string{"--router-mode", "kv"}, Env: []corev1.EnvVar{{Name: "DYN_ROUTER_POLICY_CONFIG", Value: "/etc/dynamo/policy.yaml"}}}, mode: hintsconfig.ModeKV, origin: "--router-mode",
			notRead: "sets DYN_ROUTER_POLICY_CONFIG to /etc/dynamo/policy.yaml"},
		{name: "a variable by valueFrom", container: corev1.Container{Env: []corev1.EnvVar{{Name: "DYN_ROUTER_POLICY_CONFIG", ValueFrom: &corev1.EnvVarSource{}}}}, mode: hintsconfig.ModeRoundRobin, origin: "the default router mode",
			notRead: "sets DYN_ROUTER_POLICY_CONFIG by valueFrom"},
		{name: "another volume at the manager's mount path", container: corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "mine", MountPath: v1alpha1.PolicyMountPath + "/"}}}, mode: hintsconfig.ModeRoundRobin, origin: "the default router mode",
			notRead: `mounts volume "mine" at /etc/kvhint/policy`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ReadWorkload(routerDeployment(tc.container))
			if w.Mode != tc.mode || !strings.Contains(w.ModeOrigin, tc.origin) {
				t.Errorf("mode %q from %q, want %q from %q", w.Mode, w.ModeOrigin, tc.mode, tc.origin)
			}
			switch {
			case tc.notRead == "" && (w.NotRead != "" || !w.Writable):
				t.Errorf("NotRead %q, writable %v; want the file read", w.NotRead, w.Writable)
			case tc.notRead != "" && (!strings.Contains(w.NotRead, tc.notRead) || w.Writable):
				t.Errorf("NotRead %q, writable %v; want it to say %q, and nothing written", w.NotRead, w.Writable, tc.notRead)
			}
		})
	}
}

// TestReadWorkloadEntries: the manager's three entries are read back,
// and the router container is found by either opt-in.
func TestReadWorkloadEntries(t *testing.T) {
	d := routerDeployment(corev1.Container{Args: []string{"--router-mode", "kv"}})
	if w := ReadWorkload(d); !w.Writable || w.References != "" || w.Entries || w.Container != "frontend" {
		t.Errorf("before the manager's write: writable %v, references %q, entries %v, container %q", w.Writable, w.References, w.Entries, w.Container)
	}
	spec := &d.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v1alpha1.PolicyVolumeName, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "llama-hints-0123456789abcdef"}},
	}})
	if w := ReadWorkload(d); w.References != "llama-hints-0123456789abcdef" || w.Entries {
		t.Errorf("the volume alone: references %q, entries %v", w.References, w.Entries)
	}
	c := &spec.Containers[1]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v1alpha1.PolicyVolumeName, MountPath: v1alpha1.PolicyMountPath, ReadOnly: true})
	c.Env = append(c.Env, corev1.EnvVar{Name: "DYN_ROUTER_POLICY_CONFIG", Value: v1alpha1.PolicyFilePath})
	if w := ReadWorkload(d); !w.Writable || !w.Entries {
		t.Errorf("all three entries: writable %v, entries %v, NotRead %q", w.Writable, w.Entries, w.NotRead)
	}

	d.Annotations = map[string]string{v1alpha1.RouterContainerAnnotation: "missing"}
	if w := ReadWorkload(d); w.Writable || !strings.Contains(w.NotRead, `names container "missing", but the pod template has no container of that name`) {
		t.Errorf("a container that is not there: writable %v, NotRead %q", w.Writable, w.NotRead)
	}

	// The earlier opt-in: the router container mounts the named volume.
	d.Annotations = map[string]string{v1alpha1.PolicyVolumeAnnotation: "router-policy"}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "router-policy", MountPath: "/etc/router"})
	if w := ReadWorkload(d); !w.Writable || w.Container != "frontend" {
		t.Errorf("policy-volume opt-in: writable %v, container %q, NotRead %q", w.Writable, w.Container, w.NotRead)
	}
	c.Args = append(c.Args, "--router-policy-config", "/etc/router/hints.yaml")
	if w := ReadWorkload(d); w.Writable || !strings.Contains(w.NotRead, "sets --router-policy-config to /etc/router/hints.yaml") {
		t.Errorf("policy-volume opt-in still naming its own file: writable %v, NotRead %q", w.Writable, w.NotRead)
	}
	d.Annotations[v1alpha1.PolicyVolumeAnnotation] = "nothing-mounts-it"
	if w := ReadWorkload(d); w.Writable || !strings.Contains(w.NotRead, "no container mounts it") {
		t.Errorf("policy-volume naming an unmounted volume: writable %v, NotRead %q", w.Writable, w.NotRead)
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

	got := StaleRevisions("llama", "cccccccccccccccc", revs, []appsv1.Deployment{dep}, nil, rss, nil)
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
	if got := StaleRevisions("llama", "cccccccccccccccc", revs, []appsv1.Deployment{dep}, nil, rss, nil); len(got) != 0 {
		t.Errorf("with a template the Deployment controller has not seen, nothing may go; got %d", len(got))
	}
}
