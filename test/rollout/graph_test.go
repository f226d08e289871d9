package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// routerGraph is a DGD as its owner writes it for router llama: opted in
// with the router label and the router-component annotation (empty: the
// frontend component, found by type), its frontend's pods labelled for
// the router and put on kwok's node. Dynamo's operator (the stand-in)
// renders it into Deployment llama-frontend.
func routerGraph(ns string, replicas int32) *v1beta1.DynamoGraphDeployment {
	g := dynamo.OnNode(dynamo.FrontendGraph(ns, "llama", replicas), node)
	g.Labels = map[string]string{v1alpha1.RouterLabel: "llama"}
	g.Annotations[v1alpha1.RouterComponentAnnotation] = ""
	for i := range g.Spec.Components {
		c := &g.Spec.Components[i]
		c.PodTemplate.Spec.AutomountServiceAccountToken = ptrTo(false)
		if c.ComponentType == v1beta1.ComponentTypeFrontend || c.ComponentType == v1beta1.ComponentTypeEPP {
			c.PodTemplate.Labels = map[string]string{v1alpha1.RouterLabel: "llama"}
		}
	}
	return g
}

// getGraph reads a DGD back.
func getGraph(t *testing.T, g *v1beta1.DynamoGraphDeployment) *v1beta1.DynamoGraphDeployment {
	t.Helper()
	got := &v1beta1.DynamoGraphDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// component returns a DGD's component by name.
func component(t *testing.T, g *v1beta1.DynamoGraphDeployment, name string) *v1beta1.DynamoComponentDeploymentSharedSpec {
	t.Helper()
	for i := range g.Spec.Components {
		if g.Spec.Components[i].ComponentName == name {
			return &g.Spec.Components[i]
		}
	}
	t.Fatalf("DynamoGraphDeployment %s has no component %q", g.Name, name)
	return nil
}

// requireGraphEntries checks that the DGD's component carries exactly the
// manager's three entries on revision rev, and that the manager's field
// manager owns nothing else of the DGD.
func requireGraphEntries(t *testing.T, g *v1beta1.DynamoGraphDeployment, comp, container, rev string) {
	t.Helper()
	got := getGraph(t, g)
	c := component(t, got, comp)
	if c.PodTemplate == nil || policyConfigMap(&c.PodTemplate.Spec) != rev {
		t.Fatalf("component %s of DynamoGraphDeployment %s does not mount %s", comp, g.Name, rev)
	}
	var mounted, env bool
	for _, ct := range c.PodTemplate.Spec.Containers {
		if ct.Name != container {
			continue
		}
		for _, m := range ct.VolumeMounts {
			mounted = mounted || (m.Name == v1alpha1.PolicyVolumeName && m.MountPath == v1alpha1.PolicyMountPath && m.ReadOnly)
		}
		for _, e := range ct.Env {
			env = env || (e.Name == v1alpha1.RouterPolicyConfigEnv && e.Value == v1alpha1.PolicyFilePath)
		}
	}
	if !mounted || !env {
		t.Errorf("container %s of component %s: mount %v, %s %v; want both", container, comp, mounted, v1alpha1.RouterPolicyConfigEnv, env)
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager != v1alpha1.RolloutFieldManager {
			continue
		}
		fields := mf.FieldsV1.GetRawString()
		for _, forbidden := range []string{`"f:metadata"`, `"f:replicas"`, `"f:type"`, `"f:image"`, `"f:command"`, `"f:args"`, `"f:env":{"k:{\"name\":\"DYN_ROUTER_MODE\"}"`} {
			if strings.Contains(fields, forbidden) {
				t.Errorf("the manager owns %s of DynamoGraphDeployment %s: %s", forbidden, g.Name, fields)
			}
		}
	}
}

// requireNotWritten checks that the manager never wrote the DGD.
func requireNotWritten(t *testing.T, g *v1beta1.DynamoGraphDeployment, gen int64) {
	t.Helper()
	got := getGraph(t, g)
	if got.Generation != gen {
		t.Errorf("DynamoGraphDeployment %s moved from generation %d to %d", g.Name, gen, got.Generation)
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == v1alpha1.RolloutFieldManager {
			t.Errorf("the manager wrote DynamoGraphDeployment %s: %s", g.Name, mf.FieldsV1.GetRawString())
		}
	}
}

// programmedGraph starts an n-replica DGD router whose role compiles to
// one config, and waits until every Frontend pod runs it.
func programmedGraph(t *testing.T, ns string, n int32) (*v1alpha1.RouterRole, *v1beta1.DynamoGraphDeployment, string) {
	t.Helper()
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	g := routerGraph(ns, n)
	testenv.Create(t, k8s, rr, g)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, fmt.Sprintf("%d/%d router pods run ", n, n), rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, int(n), rev)
	return rr, g, rev
}

// TestGraphValidChangeRollsTheFrontend: the manager finds the DGD's
// frontend, writes its three entries to the DGD (never to the Deployment
// Dynamo's operator renders), and a valid change rolls every Frontend
// pod onto the new revision, Programmed 3/3 only once Dynamo's status
// says the rollout is over. The revision is owned by the DGD.
func TestGraphValidChangeRollsTheFrontend(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, g, first := programmedGraph(t, ns, 3)
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", first)
	before := livePods(t, ns)

	gen := setTTL(t, rr, retain(120))
	c := waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen)
	second := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	if second == first || !strings.Contains(c.Message, hashOf(t, rr)) {
		t.Fatalf("after a valid change Programmed says %q; want 3/3 on a new hash (was %s)", c.Message, first)
	}
	requirePodsOn(t, ns, 3, second)
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", second)
	for _, old := range before {
		for _, p := range livePods(t, ns) {
			if p.UID == old.UID {
				t.Errorf("pod %s was not replaced", p.Name)
			}
		}
	}
	// Dynamo's status agrees: the generation of the manager's write is
	// observed, Ready, the frontend's replicas all updated and ready.
	got := getGraph(t, g)
	st := got.Status.Components[dynamo.FrontendComponent]
	if got.Status.ObservedGeneration != got.Generation || st.UpdatedReplicas != 3 || st.ReadyReplicas == nil || *st.ReadyReplicas != 3 {
		t.Errorf("DGD status: observed %d of generation %d, frontend %d updated, %v ready", got.Status.ObservedGeneration, got.Generation, st.UpdatedReplicas, st.ReadyReplicas)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: second}, cm); err != nil {
		t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "DynamoGraphDeployment" || cm.OwnerReferences[0].UID != got.UID {
		t.Errorf("revision %s owners %+v; want the DGD", second, cm.OwnerReferences)
	}
	if res := kstatusOf(t, rr); res.Status != status.CurrentStatus {
		t.Errorf("kstatus reads %s (%s), want Current", res.Status, res.Message)
	}
	// The Deployment Dynamo's operator renders carries the entries
	// because the DGD does: the manager wrote it no field.
	dep := &appsv1.Deployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "llama-frontend"}, dep); err != nil {
		t.Fatal(err)
	}
	for _, mf := range dep.ManagedFields {
		if mf.Manager == v1alpha1.RolloutFieldManager {
			t.Errorf("the manager wrote Deployment %s, which Dynamo's operator owns", dep.Name)
		}
	}
}

// TestGraphInvalidChangeWritesNothing: an invalid change of the role
// leaves the DGD's generation where it was: no rollout.
func TestGraphInvalidChangeWritesNothing(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, g, first := programmedGraph(t, ns, 3)
	gen := getGraph(t, g).Generation
	before := livePods(t, ns)

	bad := setTTL(t, rr, retain(-5))
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "(generation 1, the last accepted; generation 2 is not accepted)", 1)
	if rr.Generation != bad {
		t.Fatalf("the role is at generation %d, want %d", rr.Generation, bad)
	}
	if got := getGraph(t, g); got.Generation != gen {
		t.Errorf("an invalid change moved the DGD from generation %d to %d", gen, got.Generation)
	}
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", first)
	after := livePods(t, ns)
	if len(after) != len(before) {
		t.Fatalf("%d pods, were %d", len(after), len(before))
	}
	for i := range after {
		if after[i].UID != before[i].UID {
			t.Errorf("pod %s replaced by an invalid change", before[i].Name)
		}
	}
}

// TestGraphChangeMidRolloutConverges: a second change while the first
// rolls points the DGD at the newest config, and every pod ends on it.
func TestGraphChangeMidRolloutConverges(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, g, _ := programmedGraph(t, ns, 3)
	setTTL(t, rr, retain(120))
	waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonPending, "", 0)
	gen := setTTL(t, rr, retain(240))
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen)
	last := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 3, last)
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", last)
}

// TestGraphWriteSurvivesDynamo: Dynamo's operator replaces a hand edit of
// the Deployment it renders (the stand-in does, as Dynamo's does); the
// manager's entries live on the DGD, so they come back with the rest, and
// neither the DGD's generation nor the config moves.
func TestGraphWriteSurvivesDynamo(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, g, rev := programmedGraph(t, ns, 2)
	gen := getGraph(t, g).Generation
	key := client.ObjectKey{Namespace: ns, Name: "llama-frontend"}
	testenv.Eventually(t, timeout, "a hand edit of the rendered Deployment", func(ctx context.Context) error {
		dep := &appsv1.Deployment{}
		if err := k8s.Get(ctx, key, dep); err != nil {
			return err
		}
		dep.Spec.Template.Spec.Volumes = nil
		for i := range dep.Spec.Template.Spec.Containers {
			dep.Spec.Template.Spec.Containers[i].VolumeMounts = nil
		}
		return k8s.Update(ctx, dep)
	})
	testenv.Eventually(t, timeout, "Dynamo's operator restoring the Deployment", func(ctx context.Context) error {
		dep := &appsv1.Deployment{}
		if err := k8s.Get(ctx, key, dep); err != nil {
			return err
		}
		if got := policyConfigMap(&dep.Spec.Template.Spec); got != rev {
			return fmt.Errorf("the Deployment mounts %q", got)
		}
		return nil
	})
	// The hand edit rolled the pods off the file and the restore rolls
	// them back: wait for the Deployment to settle, then for Programmed.
	testenv.Eventually(t, timeout, "the restored Deployment rolled out", func(ctx context.Context) error {
		dep := &appsv1.Deployment{}
		if err := k8s.Get(ctx, key, dep); err != nil {
			return err
		}
		if s := dep.Status; s.ObservedGeneration != dep.Generation || s.UpdatedReplicas != 2 || s.ReadyReplicas != 2 || s.Replicas != 2 {
			return fmt.Errorf("status %+v at generation %d", s, dep.Generation)
		}
		if n := len(livePods(t, ns)); n != 2 {
			return fmt.Errorf("%d live pods", n)
		}
		return nil
	})
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", rr.Generation)
	requirePodsOn(t, ns, 2, rev)
	if got := getGraph(t, g); got.Generation != gen {
		t.Errorf("the DGD moved from generation %d to %d", gen, got.Generation)
	}
}

// TestGraphRefusals: what the manager reads from the DGD before any
// write; each is Programmed=False with its reason, Stalled, and the DGD
// is never written.
func TestGraphRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(g *v1beta1.DynamoGraphDeployment)
		reason v1alpha1.ConditionReason
		text   string
	}{
		{"Grove OnDelete", func(g *v1beta1.DynamoGraphDeployment) {
			delete(g.Annotations, dynamo.AnnotationEnableGrove)
			g.Annotations["nvidia.com/grove-update-strategy"] = "OnDelete"
		}, v1alpha1.ReasonUpdateStrategyOnDelete, "annotation nvidia.com/grove-update-strategy is OnDelete"},
		{"a user-set path", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Env = []corev1.EnvVar{{Name: v1alpha1.RouterPolicyConfigEnv, Value: "/etc/mine/hints.yaml"}}
		}, v1alpha1.ReasonPolicyFileNotRead, `container "main" of component "frontend" of DynamoGraphDeployment llama sets DYN_ROUTER_POLICY_CONFIG to /etc/mine/hints.yaml`},
		{"a user-set flag", func(g *v1beta1.DynamoGraphDeployment) {
			c := &g.Spec.Components[0].PodTemplate.Spec.Containers[0]
			c.Args = []string{"--router-policy-config", "/etc/mine/hints.yaml"}
		}, v1alpha1.ReasonPolicyFileNotRead, "sets --router-policy-config to /etc/mine/hints.yaml"},
		{"an EPP without its token limit", func(g *v1beta1.DynamoGraphDeployment) {
			g.Spec.Components[0].ComponentName, g.Spec.Components[0].ComponentType = "epp", v1beta1.ComponentTypeEPP
		}, v1alpha1.ReasonRouterWouldNotStart, "needs DYN_EPP_MAX_NUM_BATCHED_TOKENS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newCatalogNamespace(t)
			rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
			g := routerGraph(ns, 1)
			tc.edit(g)
			testenv.Create(t, k8s, rr, g)
			waitProgrammed(t, rr, metav1.ConditionFalse, tc.reason, tc.text, rr.Generation)
			if res := kstatusOf(t, rr); res.Status != status.FailedStatus {
				t.Errorf("kstatus reads %s (%s), want Failed", res.Status, res.Message)
			}
			requireNotWritten(t, g, 1)
		})
	}
}

// TestGraphEPP: in the Gateway API topology the router is the epp
// component; with DYN_EPP_MAX_NUM_BATCHED_TOKENS set it rolls like a
// Frontend.
func TestGraphEPP(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	g := routerGraph(ns, 2)
	g.Spec.Components[0].ComponentName, g.Spec.Components[0].ComponentType = "epp", v1beta1.ComponentTypeEPP
	g.Spec.Env = []corev1.EnvVar{{Name: "DYN_EPP_MAX_NUM_BATCHED_TOKENS", Value: "8192"}}
	testenv.Create(t, k8s, rr, g)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 2, rev)
	requireGraphEntries(t, g, "epp", "main", rev)
}

// TestGraphForcedReapplyKeepsTheEntries: Flux's sync, a forced
// server-side apply of the unchanged DGD manifest under another field
// manager, after the manager's write: the entries stay, the DGD's
// generation does not move, no pod is replaced.
func TestGraphForcedReapplyKeepsTheEntries(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	testenv.Create(t, k8s, rr)
	g := routerGraph(ns, 3)
	manifest := writeManifest(t, g)
	flux := func() {
		testenv.Get(t).Kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=kustomize-controller", "-f", manifest)
	}
	flux()
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	gen := getGraph(t, g).Generation
	before := livePods(t, ns)
	for range 3 {
		flux()
		got := getGraph(t, g)
		if got.Generation != gen || policyConfigMap(&component(t, got, dynamo.FrontendComponent).PodTemplate.Spec) != rev {
			t.Fatalf("after the forced re-apply the DGD is at generation %d; want %d, still mounting %s", got.Generation, gen, rev)
		}
	}
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", rev)
	for _, p := range livePods(t, ns) {
		found := false
		for _, old := range before {
			found = found || p.UID == old.UID
		}
		if !found {
			t.Errorf("pod %s is new: the syncs rolled the Frontend", p.Name)
		}
	}
	js, _ := json.Marshal(getGraph(t, g).Status)
	t.Logf("DGD status after the syncs: %s", js)
}

// TestGraphSampleRolls applies config/samples/dynamo-graph as it ships,
// with only the fake node added (no scheduler runs here), and waits for
// both Frontend pods on the compiled config, written in the released
// form its catalog declares.
func TestGraphSampleRolls(t *testing.T) {
	ns := newBareNamespace(t) // the sample declares its build
	rr := applySample(t, ns, filepath.Join("..", "..", "config", "samples", "dynamo-graph", "graph.yaml"), func(u *unstructured.Unstructured) {
		if u.GetKind() != "DynamoGraphDeployment" {
			return
		}
		comps, _, _ := unstructured.NestedSlice(u.Object, "spec", "components")
		for _, c := range comps {
			if err := unstructured.SetNestedField(c.(map[string]any), node, "podTemplate", "spec", "nodeName"); err != nil {
				t.Fatal(err)
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, comps, "spec", "components"); err != nil {
			t.Fatal(err)
		}
	})
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", 0)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 2, rev)
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rev}, cm); err != nil {
		t.Fatal(err)
	}
	if file := cm.Data[v1alpha1.HintsConfigKey]; !strings.Contains(file, "instances:") || !strings.Contains(file, "dynamo-soft-affinity-load-guard") {
		t.Errorf("the revision's policy file is not in the released form:\n%s", file)
	}
	requireReleasedFile(t, ns, rev)
}

// TestGraphRouterComponentMoves: the owner moves the router from the
// frontend component to a worker's frontendSidecar (the opt-in annotation
// names the worker, the router label moves with it), by server-side apply
// of its manifest. The manager releases the entries it wrote in the
// frontend (its apply no longer names that component, so the API server
// removes the fields only it owned) and writes them to the worker's
// sidecar: the frontend carries none of them, the manager owns no field
// of it, and a later apply of the owner's manifest that changes the
// frontend is not held by the manager's leftovers.
func TestGraphRouterComponentMoves(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	testenv.Create(t, k8s, rr)
	g := routerGraph(ns, 2)
	g.TypeMeta = metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "DynamoGraphDeployment"}
	worker := component(t, g, dynamo.WorkerComponent)
	worker.FrontendSidecar = ptrTo("router")
	worker.PodTemplate.Spec.Containers = append(worker.PodTemplate.Spec.Containers, corev1.Container{
		Name: "router", Image: dynamo.FrontendImage, Env: []corev1.EnvVar{{Name: "DYN_ROUTER_MODE", Value: "kv"}},
	})
	owner := func(g *v1beta1.DynamoGraphDeployment) {
		testenv.Get(t).Kubectl(t, "apply", "--server-side", "--field-manager=owner", "-f", writeManifest(t, g))
	}
	owner(g)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", rev)

	moved := g.DeepCopy()
	moved.Annotations[v1alpha1.RouterComponentAnnotation] = dynamo.WorkerComponent
	component(t, moved, dynamo.FrontendComponent).PodTemplate.Labels = map[string]string{"role": "frontend"}
	component(t, moved, dynamo.WorkerComponent).PodTemplate.Labels = map[string]string{v1alpha1.RouterLabel: "llama"}
	owner(moved)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "1/1 router pods run ", rr.Generation)
	requireGraphEntries(t, g, dynamo.WorkerComponent, "router", rev)
	got := getGraph(t, g)
	front := component(t, got, dynamo.FrontendComponent)
	if cm := policyConfigMap(&front.PodTemplate.Spec); cm != "" {
		t.Errorf("the frontend still mounts %s", cm)
	}
	for _, c := range front.PodTemplate.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == v1alpha1.PolicyVolumeName {
				t.Errorf("container %s of the frontend still mounts %s", c.Name, m.Name)
			}
		}
		for _, e := range c.Env {
			if e.Name == v1alpha1.RouterPolicyConfigEnv {
				t.Errorf("container %s of the frontend still sets %s=%s", c.Name, e.Name, e.Value)
			}
		}
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == v1alpha1.RolloutFieldManager && strings.Contains(mf.FieldsV1.GetRawString(), `"k:{\"name\":\"frontend\"}"`) {
			t.Errorf("the manager still owns fields of the frontend: %s", mf.FieldsV1.GetRawString())
		}
	}
	// The owner's next apply drops the frontend's container env: nothing
	// of the manager's is left there to hold it.
	again := moved.DeepCopy()
	component(t, again, dynamo.FrontendComponent).PodTemplate.Spec.Containers[0].Env = nil
	owner(again)
	if env := component(t, getGraph(t, g), dynamo.FrontendComponent).PodTemplate.Spec.Containers[0].Env; len(env) != 0 {
		t.Errorf("after the owner's apply the frontend's main container has env %v", env)
	}
}

// TestGraphRefusedWriteIsReported: an admission policy of the cluster's
// (here one that freezes the DGD on its first config) refuses the
// manager's write of a new config. The refusal is a PolicyConfigNotWritten
// warning event on the DGD and the roles' Programmed=False reason, naming
// the DGD and the policy's message; the roles' status keeps counting the
// pods against the config the DGD references, not the refused one. Once
// the policy is gone the write is made.
func TestGraphRefusedWriteIsReported(t *testing.T) {
	ns := newCatalogNamespace(t)
	ctx := context.Background()
	rr, g, first := programmedGraph(t, ns, 2)
	firstHash := hashOf(t, rr)
	const frozen = "this router is frozen on its first config"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"nvidia.com"}, APIVersions: []string{"*"}, Resources: []string{"dynamographdeployments"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.spec.components.all(c, !has(c.podTemplate) || !has(c.podTemplate.spec.volumes) || "+
					"c.podTemplate.spec.volumes.all(v, v.name != 'kvhint-policy' || v.configMap.name == '%s'))", first),
				Message: frozen,
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	testenv.Create(t, k8s, policy, binding)
	removed := false
	remove := func() {
		if removed {
			return
		}
		removed = true
		_ = k8s.Delete(ctx, binding)
		_ = k8s.Delete(ctx, policy)
	}
	t.Cleanup(remove)
	// A policy takes effect a moment after it is created: a dry run of
	// another revision is refused once it has.
	testenv.Eventually(t, timeout, "the freeze policy in effect", func(ctx context.Context) error {
		probe, err := workload.GraphEntries(ns, g.Name, dynamo.FrontendComponent, v1alpha1.RevisionConfigMapName("llama", "ffffffffffffffff"), "main")
		if err != nil {
			return err
		}
		err = k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(probe), client.FieldOwner("probe"), client.ForceOwnership, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), frozen) {
			return fmt.Errorf("a dry run of another revision: %v", err)
		}
		return nil
	})

	gen := setTTL(t, rr, retain(120))
	c := waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonPolicyConfigNotWritten, frozen, gen)
	if !strings.Contains(c.Message, "DynamoGraphDeployment llama") || !strings.Contains(c.Message, "2/2 router pods run "+firstHash) {
		t.Errorf("Programmed says %q; want the DGD named and the pods counted on %s", c.Message, firstHash)
	}
	if got := hashOf(t, rr); got != firstHash {
		t.Errorf("status.routerPods.hash is %s, the refused config; want %s, the one the pods run", got, firstHash)
	}
	stalled := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionStalled))
	if stalled == nil || stalled.Status != metav1.ConditionTrue {
		t.Errorf("Stalled is %+v; want True", stalled)
	}
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", first)
	testenv.Eventually(t, timeout, "the PolicyConfigNotWritten event on the DGD", func(ctx context.Context) error {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "DynamoGraphDeployment" && e.Regarding.Name == g.Name && e.Reason == "PolicyConfigNotWritten" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, frozen) {
				return nil
			}
		}
		return fmt.Errorf("no PolicyConfigNotWritten event among %d", len(evs.Items))
	})

	remove()
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", gen)
	second := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	if second == first {
		t.Fatalf("after the policy went the router still runs %s", first)
	}
	requireGraphEntries(t, g, dynamo.FrontendComponent, "main", second)
}
