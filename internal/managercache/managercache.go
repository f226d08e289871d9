package managercache

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Options returns the cache settings the reconcilers are written for.
// ConfigMaps and Pods are cached only when they carry the router label (and
// ConfigMaps only when the manager wrote them), so the manager's memory
// follows the number of routers, not the size of the cluster. namespaces,
// when not empty, limits every watch to those namespaces.
func Options(namespaces []string) cache.Options {
	hasRouter, err := labels.NewRequirement(v1alpha1.RouterLabel, selection.Exists, nil)
	if err != nil {
		panic(fmt.Sprintf("managercache: router label requirement: %v", err))
	}
	managed, err := labels.NewRequirement(v1alpha1.ManagedByLabel, selection.Equals, []string{v1alpha1.ManagedBy})
	if err != nil {
		panic(fmt.Sprintf("managercache: managed-by label requirement: %v", err))
	}
	opts := cache.Options{
		// Nothing reads managedFields from the cache; server-side apply
		// makes them large.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.NewSelector().Add(*hasRouter, *managed)},
			&corev1.Pod{}:       {Label: labels.NewSelector().Add(*hasRouter), Transform: trimPod},
			// Restart-mode routers' workloads and their revision history.
			&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*hasRouter)},
			&appsv1.ReplicaSet{}: {Label: labels.NewSelector().Add(*hasRouter), Transform: trimReplicaSet},
		},
		// Watches that wait out an API server outage, trying again every
		// 2 s: with client-go's own backoff (up to 30 s and as much jitter
		// again) a change made after a 30 s outage waited 20 to 39 s more
		// (test/fault TestAPIServerOutage).
		NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(apiwatch.Patient(context.Background(), lw), obj, resync, idx)
		},
	}
	// Namespaced ByObject entries inherit these.
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// trimPod keeps of a cached router pod what Programmed and PolicyEjected
// read: metadata, phase, the Ready condition and which ConfigMaps its
// volumes reference (for restart-mode routers). Router pods carry large
// specs (the router's own containers); the manager needs none of the rest.
//
// It also drops a sidecar report annotation (applied-hash,
// ejected-policies) that the sidecar's field manager does not own (see
// sidecarOwns), so that the status counts only what a sidecar reported.
// Of the managedFields it keeps the entry that shows the sidecar's
// ownership, and nothing else: client-go may run a transform again on an
// object it already transformed (a resync, a relist after the API server
// came back), and without that entry the second run would take the
// sidecar's own report for someone else's (test/fault
// TestAPIServerOutage: a router whose config did not change fell to 0/1
// after an outage).
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta}
	trimmed.ManagedFields = nil
	for _, mf := range pod.ManagedFields {
		if slices.ContainsFunc(sidecarReports, func(key string) bool { return sidecarOwns(mf, key) }) {
			trimmed.ManagedFields = append(trimmed.ManagedFields, mf)
		}
	}
	cloned := false
	for _, key := range sidecarReports {
		if _, ok := pod.Annotations[key]; !ok || slices.ContainsFunc(trimmed.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool { return sidecarOwns(mf, key) }) {
			continue
		}
		if !cloned {
			trimmed.Annotations, cloned = maps.Clone(pod.Annotations), true
		}
		delete(trimmed.Annotations, key)
	}
	trimmed.Status.Phase = pod.Status.Phase
	// What a rollout's measurement reads: where the sidecar's ops port
	// is.
	trimmed.Status.PodIP = pod.Status.PodIP
	trimmed.Spec.Containers = opsPorts(pod.Spec.Containers)
	trimmed.Spec.InitContainers = opsPorts(pod.Spec.InitContainers)
	// What a restart-mode router's count reads: which config revision
	// the pod mounts, and whether it is Ready.
	trimmed.Spec.Volumes = configMapVolumes(pod.Spec.Volumes)
	// Since when, and, for a staged rollout's candidate pod, whether its
	// containers restarted and how they stand.
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			trimmed.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		trimmed.Status.ContainerStatuses = append(trimmed.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, RestartCount: cs.RestartCount, State: cs.State, LastTerminationState: cs.LastTerminationState,
		})
	}
	return trimmed, nil
}

// sidecarReports are the annotations a sidecar writes on its own pod.
var sidecarReports = []string{v1alpha1.AppliedHashAnnotation, v1alpha1.EjectedPoliciesAnnotation, rolloutapi.ConfigStatusAnnotation}

// opsPorts keeps of containers the name and the ports named
// provider.OpsPortName (the sidecar's ops routes, rolloutapi.OutcomesPath
// among them) of those that have one.
func opsPorts(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.Name == provider.OpsPortName {
				out = append(out, corev1.Container{Name: c.Name, Ports: []corev1.ContainerPort{p}})
			}
		}
	}
	return out
}

// trimReplicaSet keeps of a cached ReplicaSet what config revision
// garbage collection reads: its metadata and the ConfigMaps its pod
// template mounts.
func trimReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil
	}
	trimmed := &appsv1.ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: rs.ObjectMeta}
	trimmed.Spec.Template.Spec.Volumes = configMapVolumes(rs.Spec.Template.Spec.Volumes)
	return trimmed, nil
}

// configMapVolumes returns the configMap volumes, with their name and the
// ConfigMap they reference and nothing else.
func configMapVolumes(vols []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range vols {
		if v.ConfigMap != nil {
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: v.ConfigMap.LocalObjectReference},
			}})
		}
	}
	return out
}

// sidecarOwns reports whether a managedFields entry shows the annotation
// key owned by the sidecar's field manager (v1alpha1.SidecarFieldManager).
// A value that kubectl annotate, another controller or a pod template set
// is owned by them instead, and is not a sidecar's report. This is a check
// of provenance, not of authority: a client that names itself
// "kvhint-sidecar" passes it. What makes the name trustworthy is the
// admission policy in config/admission, which lets only a pod's own
// sidecar write the annotations at all.
func sidecarOwns(mf metav1.ManagedFieldsEntry, key string) bool {
	if mf.Manager != v1alpha1.SidecarFieldManager || mf.Subresource != "" || mf.FieldsV1 == nil {
		return false
	}
	var fields struct {
		Metadata struct {
			Annotations map[string]json.RawMessage `json:"f:annotations"`
		} `json:"f:metadata"`
	}
	if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
		return false
	}
	_, ok := fields.Metadata.Annotations["f:"+key]
	return ok
}
