package workload

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// A staged rollout of a restart-mode router Deployment (a RouterRollout)
// runs its candidate on one pod first: the router's Deployment is paused,
// so nothing rolls it meanwhile, and a one-replica candidate Deployment,
// a copy of its pod template with the manager's entries on the
// candidate's revision, runs beside it. The copy's selector and pods carry
// CandidateOfLabel besides the router's labels: each ReplicaSet's pods
// have it as controller, so the two Deployments never adopt each other's
// pods, and the router's Deployment never counts the candidate's.

// CandidateOfLabel is on a candidate Deployment, its selector and its
// pods; its value is the router Deployment it stands beside.
const CandidateOfLabel = "hints.kvrouter.io/candidate-of"

// candidateSuffix ends a candidate Deployment's name.
const candidateSuffix = "-kvhint-candidate"

// CandidateName is the name of the candidate Deployment of router
// Deployment dep; a name too long is cut, since a Deployment's name is at
// most 253 characters.
func CandidateName(dep string) string {
	if max := 253 - len(candidateSuffix); len(dep) > max {
		dep = strings.TrimRight(dep[:max], "-.")
	}
	return dep + candidateSuffix
}

// IsCandidate reports whether d is a candidate Deployment.
func IsCandidate(d *appsv1.Deployment) bool {
	_, ok := d.Labels[CandidateOfLabel]
	return ok
}

// CandidateDeployment is the one-replica Deployment that runs revision
// rev on one pod beside router Deployment dep, its router container
// named container. It has dep's pod template and progress deadline, the
// manager's three entries on rev, and owner, which removes it with owner.
func CandidateDeployment(dep *appsv1.Deployment, rev, container string, owner metav1.OwnerReference) *appsv1.Deployment {
	tmpl := dep.Spec.Template.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[CandidateOfLabel] = dep.Name
	PointTemplate(tmpl, rev, container)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{CandidateOfLabel: dep.Name}}
	if dep.Spec.Selector != nil {
		sel = dep.Spec.Selector.DeepCopy()
		if sel.MatchLabels == nil {
			sel.MatchLabels = map[string]string{}
		}
		sel.MatchLabels[CandidateOfLabel] = dep.Name
	}
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: CandidateName(dep.Name), Namespace: dep.Namespace,
			Labels: map[string]string{
				v1alpha1.RouterLabel: dep.Labels[v1alpha1.RouterLabel], CandidateOfLabel: dep.Name,
				v1alpha1.ManagedByLabel: v1alpha1.ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one, Selector: sel, Template: *tmpl,
			ProgressDeadlineSeconds: dep.Spec.ProgressDeadlineSeconds,
			RevisionHistoryLimit:    &one,
		},
	}
}

// PointTemplate sets the manager's three entries in a pod template, as
// PolicyEntries writes them to a Deployment: volume
// v1alpha1.PolicyVolumeName on rev, its read-only mount in container and
// v1alpha1.RouterPolicyConfigEnv naming the file.
func PointTemplate(t *corev1.PodTemplateSpec, rev, container string) {
	vol := corev1.Volume{Name: v1alpha1.PolicyVolumeName, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: rev}}}}
	found := false
	for i := range t.Spec.Volumes {
		if t.Spec.Volumes[i].Name == v1alpha1.PolicyVolumeName {
			t.Spec.Volumes[i], found = vol, true
		}
	}
	if !found {
		t.Spec.Volumes = append(t.Spec.Volumes, vol)
	}
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		mount := corev1.VolumeMount{Name: v1alpha1.PolicyVolumeName, MountPath: v1alpha1.PolicyMountPath, ReadOnly: true}
		found = false
		for j := range c.VolumeMounts {
			if c.VolumeMounts[j].Name == v1alpha1.PolicyVolumeName {
				c.VolumeMounts[j], found = mount, true
			}
		}
		if !found {
			c.VolumeMounts = append(c.VolumeMounts, mount)
		}
		env := corev1.EnvVar{Name: v1alpha1.RouterPolicyConfigEnv, Value: v1alpha1.PolicyFilePath}
		found = false
		for j := range c.Env {
			if c.Env[j].Name == v1alpha1.RouterPolicyConfigEnv {
				c.Env[j], found = env, true
			}
		}
		if !found {
			c.Env = append(c.Env, env)
		}
	}
}

// RevisionHashOf returns the config hash of the revision a pod spec
// mounts as the manager's volume, for router router, or "".
func RevisionHashOf(spec *corev1.PodSpec, router string) string {
	prefix := v1alpha1.RevisionConfigMapName(router, "")
	for _, v := range spec.Volumes {
		if v.Name == v1alpha1.PolicyVolumeName && v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, prefix) {
			return v.ConfigMap.Name[len(prefix):]
		}
	}
	return ""
}
