package dynamo_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// createGraph creates FrontendGraph(ns, "llama", 3) with a graph-wide env
// (DYN_LOG, and a DYN_ROUTER_MODE the frontend's own entry overrides) and
// label, and waits for the frontend's Deployment.
func createGraph(t *testing.T, ns string) (*v1beta1.DynamoGraphDeployment, *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	dgd := dynamo.FrontendGraph(ns, "llama", 3)
	dgd.Spec.Env = []corev1.EnvVar{{Name: "DYN_LOG", Value: "info"}, {Name: "DYN_ROUTER_MODE", Value: "round-robin"}}
	dgd.Spec.Labels = map[string]string{"team": "serving"}
	dgd.Spec.Components[0].PodTemplate.Labels = map[string]string{"kvhint.io/router": "llama"}
	if err := k8s.Create(ctx, dgd); err != nil {
		t.Fatal(err)
	}
	return dgd, waitDeployment(t, ns, dynamo.DeploymentName("llama", dynamo.FrontendComponent))
}

func waitDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	dep := &appsv1.Deployment{}
	testenv.Eventually(t, timeout, "Deployment "+name, func(ctx context.Context) error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dep)
	})
	return dep
}

// TestStandInRendersFrontend checks the Deployment rendered for a frontend
// component: name, Dynamo's labels and selector, the graph's env before the
// component's (the component's value winning), Dynamo's frontend command,
// replicas, strategy, owner and the last-applied annotations.
func TestStandInRendersFrontend(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	dgd, dep := createGraph(t, ns)

	if dep.Name != "llama-frontend" {
		t.Errorf("name %q, want llama-frontend", dep.Name)
	}
	wantPodLabels := map[string]string{
		dynamo.LabelGraph:         "llama",
		dynamo.LabelComponent:     "frontend",
		dynamo.LabelComponentType: "frontend",
		dynamo.LabelSelector:      "llama-frontend",
		"team":                    "serving",
		"kvhint.io/router":        "llama",
	}
	if d := cmp.Diff(wantPodLabels, dep.Spec.Template.Labels); d != "" {
		t.Errorf("pod labels (-want +got):\n%s", d)
	}
	for _, k := range []string{dynamo.LabelGraph, dynamo.LabelComponent, dynamo.LabelComponentType, "team"} {
		if dep.Labels[k] != wantPodLabels[k] {
			t.Errorf("Deployment label %s=%q, want %q", k, dep.Labels[k], wantPodLabels[k])
		}
	}
	if d := cmp.Diff(map[string]string{dynamo.LabelSelector: "llama-frontend"}, dep.Spec.Selector.MatchLabels); d != "" {
		t.Errorf("selector (-want +got):\n%s", d)
	}
	main := container(t, &dep.Spec.Template.Spec, "main")
	wantEnv := []corev1.EnvVar{{Name: "DYN_LOG", Value: "info"}, {Name: "DYN_ROUTER_MODE", Value: "kv"}}
	if d := cmp.Diff(wantEnv, main.Env); d != "" {
		t.Errorf("main env (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"python3"}, main.Command); d != "" {
		t.Errorf("main command (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"-m", "dynamo.frontend"}, main.Args); d != "" {
		t.Errorf("main args (-want +got):\n%s", d)
	}
	if main.Image != dynamo.FrontendImage {
		t.Errorf("image %q, want %q", main.Image, dynamo.FrontendImage)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	quarter := intstr.FromString("25%")
	wantStrategy := appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &quarter, MaxUnavailable: &quarter},
	}
	if d := cmp.Diff(wantStrategy, dep.Spec.Strategy); d != "" {
		t.Errorf("strategy (-want +got):\n%s", d)
	}
	// Owned as Dynamo's operator owns it: the Deployment by a
	// DynamoComponentDeployment of its name, that by the graph.
	dcd := &v1beta1.DynamoComponentDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "llama-frontend"}, dcd); err != nil {
		t.Fatalf("the frontend's DynamoComponentDeployment: %v", err)
	}
	if ref := metav1.GetControllerOf(dep); ref == nil || ref.Kind != "DynamoComponentDeployment" || ref.Name != "llama-frontend" || ref.UID != dcd.UID {
		t.Errorf("controller reference %+v, want DynamoComponentDeployment llama-frontend", ref)
	}
	if ref := metav1.GetControllerOf(dcd); ref == nil || ref.Kind != "DynamoGraphDeployment" || ref.Name != "llama" || ref.UID != dgd.UID {
		t.Errorf("the DynamoComponentDeployment's controller reference %+v, want the graph llama", ref)
	}
	if dep.Annotations[dynamo.AnnotationLastAppliedHash] == "" {
		t.Errorf("no %s annotation", dynamo.AnnotationLastAppliedHash)
	}
	if got := dep.Annotations[dynamo.AnnotationLastAppliedGeneration]; got != strconv.FormatInt(dep.Generation, 10) {
		t.Errorf("%s=%q, want the generation %d", dynamo.AnnotationLastAppliedGeneration, got, dep.Generation)
	}

	// The worker: its own Deployment, named after the worker hash, its
	// type label, one replica, and no frontend command.
	w := waitDeployment(t, ns, workerName(dgd))
	if want := "llama-worker-" + dynamo.WorkerHash(dgd); w.Name != want || len(dynamo.WorkerHash(dgd)) != 8 {
		t.Errorf("worker Deployment %q, want %q with an eight-digit hash", w.Name, want)
	}
	if w.Spec.Template.Labels[dynamo.LabelComponentType] != "worker" || *w.Spec.Replicas != 1 {
		t.Errorf("worker: type label %q replicas %d, want worker 1", w.Spec.Template.Labels[dynamo.LabelComponentType], *w.Spec.Replicas)
	}
	if c := container(t, &w.Spec.Template.Spec, "main"); len(c.Command) != 0 || len(c.Args) != 0 {
		t.Errorf("worker command %q args %q, want none", c.Command, c.Args)
	}
}

// TestStandInRevertsHandEdit edits the rendered Deployment's pod template
// by hand; the stand-in writes its own spec back, as Dynamo's operator
// does, and stamps the new generation.
func TestStandInRevertsHandEdit(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	_, dep := createGraph(t, ns)
	ctx := context.Background()

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		container(t, &dep.Spec.Template.Spec, "main").Image = "hand-edited:1"
		dep.Spec.Template.Spec.Volumes = append(dep.Spec.Template.Spec.Volumes, corev1.Volume{
			Name: "by-hand", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
		})
		return k8s.Update(ctx, dep)
	})
	if err != nil {
		t.Fatal(err)
	}
	edited := dep.Generation
	testenv.Eventually(t, timeout, "the hand edit reverted", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if dep.Generation <= edited {
			return fmt.Errorf("generation %d, the edit's %d", dep.Generation, edited)
		}
		return nil
	})
	if got := container(t, &dep.Spec.Template.Spec, "main").Image; got != dynamo.FrontendImage {
		t.Errorf("image %q after the revert, want %q", got, dynamo.FrontendImage)
	}
	if len(dep.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("volumes %v after the revert, want none", dep.Spec.Template.Spec.Volumes)
	}
	if got := dep.Annotations[dynamo.AnnotationLastAppliedGeneration]; got != strconv.FormatInt(dep.Generation, 10) {
		t.Errorf("%s=%q, want the generation %d", dynamo.AnnotationLastAppliedGeneration, got, dep.Generation)
	}
}

// TestStandInRendersTemplateChange changes the frontend's podTemplate in
// the graph (a volume, a mount and an env entry, what the manager adds);
// the Deployment gets them.
func TestStandInRendersTemplateChange(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	dgd, dep := createGraph(t, ns)
	ctx := context.Background()

	// The stand-in writes the graph's status meanwhile: retry on a
	// conflict, from the graph as it is now.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dgd), dgd); err != nil {
			return err
		}
		tmpl := dgd.Spec.Components[0].PodTemplate
		tmpl.Spec.Volumes = []corev1.Volume{{Name: "llama-hints-abc", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "llama-hints-abc"}},
		}}}
		tmpl.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "llama-hints-abc", MountPath: "/etc/kvhint", ReadOnly: true}}
		tmpl.Spec.Containers[0].Env = append(tmpl.Spec.Containers[0].Env, corev1.EnvVar{Name: "DYN_ROUTER_POLICY_CONFIG", Value: "/etc/kvhint/hints.yaml"})
		return k8s.Update(ctx, dgd)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the template change rendered", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if n := len(dep.Spec.Template.Spec.Volumes); n != 1 {
			return fmt.Errorf("%d volumes", n)
		}
		return nil
	})
	if got := dep.Spec.Template.Spec.Volumes[0]; got.Name != "llama-hints-abc" || got.ConfigMap == nil || got.ConfigMap.Name != "llama-hints-abc" {
		t.Errorf("volume %+v, want ConfigMap llama-hints-abc", got)
	}
	main := container(t, &dep.Spec.Template.Spec, "main")
	if d := cmp.Diff([]corev1.VolumeMount{{Name: "llama-hints-abc", MountPath: "/etc/kvhint", ReadOnly: true}}, main.VolumeMounts); d != "" {
		t.Errorf("mounts (-want +got):\n%s", d)
	}
	wantEnv := []corev1.EnvVar{{Name: "DYN_LOG", Value: "info"}, {Name: "DYN_ROUTER_MODE", Value: "kv"}, {Name: "DYN_ROUTER_POLICY_CONFIG", Value: "/etc/kvhint/hints.yaml"}}
	if d := cmp.Diff(wantEnv, main.Env); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	if got := dep.Annotations[dynamo.AnnotationLastAppliedGeneration]; got != strconv.FormatInt(dep.Generation, 10) {
		t.Errorf("%s=%q, want the generation %d", dynamo.AnnotationLastAppliedGeneration, got, dep.Generation)
	}
}

// TestStandInCopiesStatus writes, as kube-controller-manager would, the
// status of a Deployment rolled out and ready; the graph's status follows:
// Ready False (updating) before, then Ready True, state successful, the
// observed generation and the replica counts. A progress deadline passed
// makes the graph failed.
func TestStandInCopiesStatus(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	dgd, dep := createGraph(t, ns)
	worker := waitDeployment(t, ns, workerName(dgd))

	waitGraph(t, dgd, "Ready False, some_resources_are_not_ready", func(g *v1beta1.DynamoGraphDeployment) bool {
		c := meta.FindStatusCondition(g.Status.Conditions, v1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1beta1.ReasonSomeResourcesNotReady &&
			c.ObservedGeneration == g.Generation &&
			g.Status.State == v1beta1.DGDStatePending && g.Status.ObservedGeneration == g.Generation
	})

	setStatus(t, worker, 1, 1, 1)
	setStatus(t, dep, 3, 3, 2)
	waitGraph(t, dgd, "Ready False on the frontend alone", func(g *v1beta1.DynamoGraphDeployment) bool {
		c := meta.FindStatusCondition(g.Status.Conditions, v1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1beta1.ReasonSomeResourcesNotReady &&
			c.Message == "frontend: 2/3 ready"
	})

	setStatus(t, dep, 3, 3, 3)
	waitGraph(t, dgd, "Ready True", func(g *v1beta1.DynamoGraphDeployment) bool {
		c := meta.FindStatusCondition(g.Status.Conditions, v1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	c := meta.FindStatusCondition(dgd.Status.Conditions, v1beta1.ConditionReady)
	if c.Reason != v1beta1.ReasonAllResourcesReady || c.ObservedGeneration != dgd.Generation {
		t.Errorf("Ready reason %q observedGeneration %d, want %s %d", c.Reason, c.ObservedGeneration, v1beta1.ReasonAllResourcesReady, dgd.Generation)
	}
	if dgd.Status.State != v1beta1.DGDStateSuccessful || dgd.Status.ObservedGeneration != dgd.Generation {
		t.Errorf("state %q observedGeneration %d, want successful %d", dgd.Status.State, dgd.Status.ObservedGeneration, dgd.Generation)
	}
	three := int32(3)
	want := v1beta1.ComponentReplicaStatus{
		ComponentKind: v1beta1.ComponentKindDeployment, ComponentNames: []string{"llama-frontend"},
		Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: &three, AvailableReplicas: &three,
	}
	if d := cmp.Diff(want, dgd.Status.Components["frontend"]); d != "" {
		t.Errorf("status.components[frontend] (-want +got):\n%s", d)
	}

	// The rollout gives up: the graph fails.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		dep.Status.Conditions = []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
			Message: "ReplicaSet has timed out progressing.", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}}
		return k8s.Status().Update(context.Background(), dep)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitGraph(t, dgd, "state failed", func(g *v1beta1.DynamoGraphDeployment) bool {
		c := meta.FindStatusCondition(g.Status.Conditions, v1beta1.ConditionReady)
		return g.Status.State == v1beta1.DGDStateFailed && c != nil && c.Status == metav1.ConditionFalse
	})
}

// setStatus writes a Deployment's status as the Deployment controller
// would: its generation observed, n replicas, updated of them updated and
// ready of them ready and available.
func setStatus(t *testing.T, dep *appsv1.Deployment, n, updated, ready int32) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		dep.Status = appsv1.DeploymentStatus{
			ObservedGeneration: dep.Generation,
			Replicas:           n,
			UpdatedReplicas:    updated,
			ReadyReplicas:      ready,
			AvailableReplicas:  ready,
		}
		return k8s.Status().Update(ctx, dep)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitGraph waits until the graph satisfies cond, leaving it in dgd.
func waitGraph(t *testing.T, dgd *v1beta1.DynamoGraphDeployment, what string, cond func(*v1beta1.DynamoGraphDeployment) bool) {
	t.Helper()
	testenv.Eventually(t, timeout, "graph "+dgd.Name+": "+what, func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dgd), dgd); err != nil {
			return err
		}
		if !cond(dgd) {
			return fmt.Errorf("status %+v", dgd.Status)
		}
		return nil
	})
}

func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q in %v", name, spec.Containers)
	return nil
}

// workerName is the name of the objects FrontendGraph's worker is
// rendered into, under the graph's current worker hash.
func workerName(dgd *v1beta1.DynamoGraphDeployment) string {
	return dynamo.ComponentName(dgd, dgd.Component(dynamo.WorkerComponent))
}

// TestStandInRollsWorkers changes the worker's template: the worker hash
// moves, the worker rolls onto a new DynamoComponentDeployment and
// Deployment, the graph reports rolling_update_in_progress with both names
// until the new Deployment is ready, and then the old objects go. The
// frontend's Deployment keeps its name throughout.
func TestStandInRollsWorkers(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "dynamo")
	dgd, fe := createGraph(t, ns)
	oldName := workerName(dgd)
	setStatus(t, waitDeployment(t, ns, oldName), 1, 1, 1)
	setStatus(t, fe, 3, 3, 3)
	waitGraph(t, dgd, "Ready True", func(g *v1beta1.DynamoGraphDeployment) bool {
		return meta.IsStatusConditionTrue(g.Status.Conditions, v1beta1.ConditionReady)
	})

	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dgd), dgd); err != nil {
			return err
		}
		dgd.Component(dynamo.WorkerComponent).PodTemplate.Spec.Containers[0].Image = "dynamo-worker:next"
		return k8s.Update(ctx, dgd)
	})
	if err != nil {
		t.Fatal(err)
	}
	newName := workerName(dgd)
	if newName == oldName {
		t.Fatalf("the worker hash did not move: %s", newName)
	}
	next := waitDeployment(t, ns, newName)
	waitGraph(t, dgd, "Ready False, rolling_update_in_progress", func(g *v1beta1.DynamoGraphDeployment) bool {
		c := meta.FindStatusCondition(g.Status.Conditions, v1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1beta1.ReasonRollingUpdate &&
			c.ObservedGeneration == g.Generation &&
			cmp.Equal(g.Status.Components[dynamo.WorkerComponent].ComponentNames, []string{oldName, newName})
	})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldName}, &appsv1.Deployment{}); err != nil {
		t.Errorf("the old worker Deployment went before the new one was ready: %v", err)
	}

	setStatus(t, next, 1, 1, 1)
	testenv.Eventually(t, timeout, "the old worker's objects deleted", func(ctx context.Context) error {
		errDep := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldName}, &appsv1.Deployment{})
		errDCD := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldName}, &v1beta1.DynamoComponentDeployment{})
		if !apierrors.IsNotFound(errDep) || !apierrors.IsNotFound(errDCD) {
			return fmt.Errorf("Deployment: %v; DynamoComponentDeployment: %v", errDep, errDCD)
		}
		return nil
	})
	waitGraph(t, dgd, "Ready True again", func(g *v1beta1.DynamoGraphDeployment) bool {
		c := meta.FindStatusCondition(g.Status.Conditions, v1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == g.Generation &&
			cmp.Equal(g.Status.Components[dynamo.WorkerComponent].ComponentNames, []string{newName})
	})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llama-frontend"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("the frontend's Deployment: %v", err)
	}
}
