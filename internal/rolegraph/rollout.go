package rolegraph

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// revisionConfigMap is the immutable copy of a router's compiled
// ConfigMap that restart-mode workloads mount: the same data, labels and
// annotations, named by the hash and labelled with it. Immutable, because
// a pod must keep the file it started with: a rollback to a revision
// brings back exactly that file.
//
// Its owners are the workloads, not the RouterRoles: a revision is what
// the Deployment's pods and ReplicaSets mount, and must outlive the
// RouterRoles (deleting the last one must not break the next pod start);
// it goes with the Deployments, or when the manager finds nothing
// references it (StaleRevisions).
func revisionConfigMap(compiled *corev1.ConfigMap, router, hash string, workloads []*Workload) *corev1.ConfigMap {
	cm := compiled.DeepCopy()
	cm.Name = v1alpha1.RevisionConfigMapName(router, hash)
	cm.Labels = maps.Clone(compiled.Labels)
	cm.Labels[v1alpha1.ConfigHashLabel] = hash
	cm.OwnerReferences = nil
	for _, w := range workloads {
		cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{
			APIVersion: w.APIVersion, Kind: w.Kind, Name: w.Name, UID: w.UID,
		})
	}
	immutable := true
	cm.Immutable = &immutable
	return cm
}

// IsRevision reports whether a ConfigMap is a compiled config revision
// the manager wrote for router: its labels say so and its name is the one
// the manager gives it. Only those are ever garbage collected.
func IsRevision(cm *corev1.ConfigMap, router string) bool {
	hash := cm.Labels[v1alpha1.ConfigHashLabel]
	return hash != "" && cm.Labels[v1alpha1.RouterLabel] == router &&
		cm.Labels[v1alpha1.ManagedByLabel] == v1alpha1.ManagedBy &&
		cm.Name == v1alpha1.RevisionConfigMapName(router, hash)
}

// StaleRevisions returns the config revisions of a router that nothing
// can run any more, to be deleted: not the current one, and referenced by
// no pod template of a Deployment or ReplicaSet given (a Deployment's
// ReplicaSets are its revision history, which `kubectl rollout undo`
// returns to, so a revision stays while any of them names it) nor by any
// pod. It returns nothing while a workload's controller has not yet seen
// its current template (status.observedGeneration behind generation):
// the ReplicaSet of the template just written may not exist yet.
func StaleRevisions(router, current string, revisions []corev1.ConfigMap, deps []appsv1.Deployment, graphs []dynamograph.Graph, rss []appsv1.ReplicaSet, pods []corev1.Pod) []*corev1.ConfigMap {
	used := map[string]bool{v1alpha1.RevisionConfigMapName(router, current): true}
	for i := range graphs {
		g := &graphs[i]
		if g.Status.ObservedGeneration < g.Generation {
			return nil
		}
		for _, c := range g.Spec.Components {
			if c.PodTemplate != nil {
				addVolumes(used, c.PodTemplate.Spec.Volumes)
			}
		}
	}
	for i := range deps {
		d := &deps[i]
		if d.Status.ObservedGeneration < d.Generation {
			return nil
		}
		addVolumes(used, d.Spec.Template.Spec.Volumes)
	}
	for i := range rss {
		addVolumes(used, rss[i].Spec.Template.Spec.Volumes)
	}
	for i := range pods {
		addVolumes(used, pods[i].Spec.Volumes)
	}
	var stale []*corev1.ConfigMap
	for i := range revisions {
		cm := &revisions[i]
		if IsRevision(cm, router) && !used[cm.Name] && cm.DeletionTimestamp == nil {
			stale = append(stale, cm)
		}
	}
	slices.SortFunc(stale, func(a, b *corev1.ConfigMap) int { return cmp.Compare(a.Name, b.Name) })
	return stale
}

func addVolumes(used map[string]bool, vols []corev1.Volume) {
	for _, v := range vols {
		if v.ConfigMap != nil {
			used[v.ConfigMap.Name] = true
		}
	}
}

// countRestartPods counts a restart-mode router's pods: a pod runs the
// config when it is Ready and its policy volume references the config's
// revision. The total is the router's live pods, or the workloads' desired
// replicas when there are fewer (pods not created yet do not run it
// either).
func countRestartPods(pods []corev1.Pod, router, hash string, workloads []*Workload) podCount {
	if slices.ContainsFunc(workloads, func(w *Workload) bool { return w.graph != "" }) {
		// A DynamoGraphDeployment's other components may carry the
		// router label too (spec.labels reach every component).
		pods = slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool {
			return !slices.ContainsFunc(workloads, func(w *Workload) bool { return w.owns(&p) })
		})
	}
	c := countPods(pods, router, hash)
	c.upToDate = 0
	want := v1alpha1.RevisionConfigMapName(router, hash)
	for i := range pods {
		if p := &pods[i]; livePod(p, router) && podReady(p) && mounts(p, want) {
			c.upToDate++
		}
	}
	var replicas int32
	for _, w := range workloads {
		replicas += w.Replicas
	}
	c.total = max(c.total, replicas)
	c.restart = true
	return c
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func mounts(p *corev1.Pod, configMap string) bool {
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == configMap {
			return true
		}
	}
	return false
}

// referencedHash is the hash of the revision the router's workloads
// reference now, the first found; empty when none references one.
func referencedHash(router string, workloads []*Workload) string {
	prefix := v1alpha1.HintsConfigMapName(router) + "-"
	for _, w := range workloads {
		if h, ok := strings.CutPrefix(w.References, prefix); ok && h != "" {
			return h
		}
	}
	return ""
}
