package workload

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// Restart-mode routers (see v1alpha1.RouterContainerAnnotation): the
// manager writes each compiled config as an immutable ConfigMap named by
// its hash and adds three entries of its own to the opted-in
// Deployments' pod template (a volume on that ConfigMap, a read-only
// mount of it in the router container, and the variable that names the
// file); the Deployment's own rolling update replaces the pods.
// Deployments are patched, never created or deleted, and only those
// entries; the admission policy config/admission/rollout_writers.yaml
// holds the manager's identity to that.
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=list;watch

// Deployments writes opted-in Deployments (v1alpha1.OptedIn).
type Deployments struct {
	Client   client.Client
	Recorder events.EventRecorder
}

func (d *Deployments) Kind() string { return rolegraph.WorkloadKind }

// List reads the router's Deployments into in.Deployments.
func (d *Deployments) List(ctx context.Context, namespace, router string, in *rolegraph.Input) error {
	var deps appsv1.DeploymentList
	if err := d.Client.List(ctx, &deps, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.RouterLabel: router}); err != nil {
		return fmt.Errorf("listing the Deployments of router %s: %w", router, err)
	}
	in.Deployments = deps.Items
	return nil
}

func (d *Deployments) OptedIn(in *rolegraph.Input) bool {
	for i := range in.Deployments {
		if v1alpha1.OptedIn(in.Deployments[i].Annotations) {
			return true
		}
	}
	return false
}

// Point writes the manager's three entries of the Deployment's pod
// template with server-side apply, as its own field manager: the volume
// v1alpha1.PolicyVolumeName on the revision, its read-only mount at
// v1alpha1.PolicyMountPath in the router container, and
// v1alpha1.RouterPolicyConfigEnv naming the file. The owner's manifest
// has none of them, so a re-apply of it by another field manager, forced
// or not, leaves them alone. Ownership is forced: a reference set by
// hand is drift, set back to the compiled config and reported with an
// event on the Deployment.
func (d *Deployments) Point(ctx context.Context, rev *corev1.ConfigMap, w *rolegraph.Workload, in *rolegraph.Input) error {
	deps := in.Deployments
	ac := appsv1ac.Deployment(w.Name, rev.Namespace).
		WithSpec(appsv1ac.DeploymentSpec().
			WithTemplate(PolicyEntries(rev.Name, w.Container)))
	if err := d.Client.Apply(ctx, ac, client.FieldOwner(v1alpha1.RolloutFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("pointing Deployment %s at ConfigMap %s: %w", w.Name, rev.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Rolling out config", "deployment", w.Name, "container", w.Container, "from", w.References, "to", rev.Name)
	if d.Recorder == nil {
		return nil
	}
	for i := range deps {
		if deps[i].Name != w.Name {
			continue
		}
		if w.References == "" {
			d.Recorder.Eventf(&deps[i], nil, corev1.EventTypeNormal, "PolicyConfigChanged", "Roll",
				"volume %s: ConfigMap %s, the compiled config, mounted at %s in container %s", v1alpha1.PolicyVolumeName, rev.Name, v1alpha1.PolicyMountPath, w.Container)
			continue
		}
		d.Recorder.Eventf(&deps[i], nil, corev1.EventTypeNormal, "PolicyConfigChanged", "Roll",
			"volume %s: ConfigMap %s replaced by %s, the compiled config (a reference set by hand is set back)", v1alpha1.PolicyVolumeName, w.References, rev.Name)
	}
	return nil
}
