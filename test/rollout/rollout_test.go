package rollout

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// programmed3 starts a 3-replica router whose role compiles to one config
// and waits until all three pods run it; it returns the role, the
// Deployment and the config's revision ConfigMap name.
func programmed3(t *testing.T, ns string) (*v1alpha1.RouterRole, *appsv1.Deployment, string) {
	t.Helper()
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 3)
	testenv.Create(t, k8s, rr, dep)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 3, rev)
	return rr, dep, rev
}

// TestValidChangeRollsEveryPod: a valid change is a new immutable
// revision; the Deployment's rolling update replaces all three pods, and
// Programmed reads 3/3 with the new hash. The previous revision stays:
// the old ReplicaSet still names it.
func TestValidChangeRollsEveryPod(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first := programmed3(t, ns)
	before := livePods(t, ns)

	gen := setTTL(t, rr, retain(120))
	c := waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen)
	hash := hashOf(t, rr)
	second := v1alpha1.RevisionConfigMapName("llama", hash)
	if second == first || !strings.Contains(c.Message, hash) {
		t.Fatalf("after a valid change Programmed says %q; want 3/3 on a new hash (was %s)", c.Message, first)
	}
	requirePodsOn(t, ns, 3, second)
	for _, old := range before {
		for _, p := range livePods(t, ns) {
			if p.UID == old.UID {
				t.Errorf("pod %s was not replaced", p.Name)
			}
		}
	}

	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: second}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Immutable == nil || !*cm.Immutable || cm.Data[v1alpha1.HintsConfigKey] == "" || !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "ttl_seconds: 120") {
		t.Errorf("revision %s: immutable %v, hints.yaml %q; want an immutable copy of the new config", second, cm.Immutable, cm.Data[v1alpha1.HintsConfigKey])
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: first}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the previous revision %s is gone while a ReplicaSet names it: %v", first, err)
	}
	if res := kstatusOf(t, rr); res.Status != status.CurrentStatus {
		t.Errorf("kstatus reads %s (%s), want Current", res.Status, res.Message)
	}
	requireOnlyVolumeWritten(t, dep)
}

// requireOnlyVolumeWritten checks the manager's field manager owns
// nothing of the Deployment but its three entries: the volume, the
// read-only mount and the variable in container frontend.
func requireOnlyVolumeWritten(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	for _, mf := range dep.ManagedFields {
		if !strings.HasPrefix(mf.Manager, "kvhint") {
			continue
		}
		if mf.Manager != v1alpha1.RolloutFieldManager || mf.Subresource != "" || mf.FieldsV1.GetRawString() != threeEntries {
			t.Errorf("the manager owns %s of the Deployment as %s (subresource %q); want only its three entries as %s",
				mf.FieldsV1.GetRawString(), mf.Manager, mf.Subresource, v1alpha1.RolloutFieldManager)
		}
	}
}

// threeEntries are the fields of the manager's server-side apply of a
// Deployment: its three entries in container frontend.
const threeEntries = `{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"frontend\"}":{".":{},"f:env":{"k:{\"name\":\"DYN_ROUTER_POLICY_CONFIG\"}":{".":{},"f:name":{},"f:value":{}}},"f:name":{},"f:volumeMounts":{"k:{\"mountPath\":\"/etc/kvhint/policy\"}":{".":{},"f:mountPath":{},"f:name":{},"f:readOnly":{}}}}},"f:volumes":{"k:{\"name\":\"kvhint-policy\"}":{".":{},"f:configMap":{"f:name":{}},"f:name":{}}}}}}}`

// TestInvalidChangeRollsNothing: an invalid change is refused, the
// compiled config stays what it was, and nothing of the Deployment
// changes: the same pods keep the last good file.
func TestInvalidChangeRollsNothing(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, rev := programmed3(t, ns)
	before := livePods(t, ns)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	depGen := dep.Generation

	gen := setTTL(t, rr, retain(0))
	testenv.Eventually(t, timeout, "Accepted=False for the invalid generation", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != gen {
			return fmt.Errorf("Accepted: %+v", c)
		}
		return nil
	})
	// The status of the invalid generation is written after the rollout
	// step of the same reconcile: had it rolled anything, it would show.
	c := waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", 0)
	if !strings.Contains(c.Message, "the last accepted") {
		t.Errorf("Programmed says %q; want it to name the last accepted generation", c.Message)
	}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if dep.Generation != depGen || policyConfigMap(&dep.Spec.Template.Spec) != rev {
		t.Errorf("Deployment at generation %d mounting %q; want generation %d mounting %q", dep.Generation, policyConfigMap(&dep.Spec.Template.Spec), depGen, rev)
	}
	requirePodsOn(t, ns, 3, rev)
	after := livePods(t, ns)
	for i := range before {
		found := false
		for j := range after {
			found = found || after[j].UID == before[i].UID
		}
		if !found {
			t.Errorf("pod %s was replaced after an invalid change", before[i].Name)
		}
	}
}

// TestChangeDuringRollout: a second change while the first rolls ends
// with every pod on the newest config.
func TestChangeDuringRollout(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, _ := programmed3(t, ns)

	gen := setTTL(t, rr, retain(120))
	testenv.Eventually(t, timeout, "the Deployment rolling the second config", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionProgrammed))
		if c == nil || c.ObservedGeneration != gen {
			return fmt.Errorf("generation %d not compiled yet", gen)
		}
		return nil
	})
	midway := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionProgrammed))
	gen = setTTL(t, rr, retain(180))
	c := waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen)
	t.Logf("Programmed when the third config was applied: %s %s; at the end: %s", midway.Status, midway.Message, c.Message)
	newest := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	testenv.Eventually(t, timeout, "every pod on the newest config and the rollout done", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if dep.Status.UpdatedReplicas != 3 || dep.Status.ReadyReplicas != 3 || dep.Status.Replicas != 3 {
			return fmt.Errorf("Deployment: %d updated, %d ready, %d in all", dep.Status.UpdatedReplicas, dep.Status.ReadyReplicas, dep.Status.Replicas)
		}
		return nil
	})
	requirePodsOn(t, ns, 3, newest)
	if got := policyConfigMap(&dep.Spec.Template.Spec); got != newest {
		t.Errorf("the Deployment mounts %s, want the newest config %s", got, newest)
	}
}

// TestRolloutUndoFindsItsConfigMap: `kubectl rollout undo` returns the
// Deployment to the previous revision's template, whose policy volume
// names the previous config revision; that ConfigMap is still there. The
// manager then takes the reference for drift and sets it back to the
// compiled config, with an event on the Deployment.
func TestRolloutUndoFindsItsConfigMap(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr, dep, first := programmed3(t, ns)
	gen := setTTL(t, rr, retain(120))
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen)
	second := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))

	// The ReplicaSet undo returns to mounts the first revision.
	var rss appsv1.ReplicaSetList
	if err := k8s.List(context.Background(), &rss, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var previous []string
	for _, rs := range rss.Items {
		previous = append(previous, policyConfigMap(&rs.Spec.Template.Spec))
	}
	if !contains(previous, first) {
		t.Fatalf("no ReplicaSet mounts %s: %v", first, previous)
	}

	out := testenv.Get(t).Kubectl(t, "-n", ns, "rollout", "undo", "deployment/"+dep.Name)
	t.Logf("kubectl rollout undo: %s", strings.TrimSpace(out))
	// Whatever the undo's template names, the ConfigMap is there.
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: first}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("ConfigMap %s, which the undone-to revision mounts, is gone: %v", first, err)
	}
	testenv.Eventually(t, timeout, "the drift event on the Deployment", func(ctx context.Context) error {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == dep.Name && e.Reason == "PolicyConfigChanged" && strings.Contains(e.Note, first+" replaced by "+second) {
				return nil
			}
		}
		return fmt.Errorf("no PolicyConfigChanged event saying %s replaced by %s among %d events", first, second, len(evs.Items))
	})
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen)
	testenv.Eventually(t, timeout, "the rollout back on the compiled config done", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if got := policyConfigMap(&dep.Spec.Template.Spec); got != second {
			return fmt.Errorf("template mounts %s", got)
		}
		if dep.Status.UpdatedReplicas != 3 || dep.Status.Replicas != 3 || dep.Status.ReadyReplicas != 3 {
			return fmt.Errorf("Deployment: %d updated, %d ready, %d in all", dep.Status.UpdatedReplicas, dep.Status.ReadyReplicas, dep.Status.Replicas)
		}
		return nil
	})
	requirePodsOn(t, ns, 3, second)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestStuckRolloutIsFailed: a Deployment whose pods cannot start (its
// template names a node nobody runs) passes its progress deadline; the
// role's Programmed carries the Deployment's message under RolloutFailed,
// and kstatus reads the role as Failed.
func TestStuckRolloutIsFailed(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 3)
	dep.Spec.Template.Spec.NodeName = "nowhere"
	dep.Spec.ProgressDeadlineSeconds = ptrTo(int32(5))
	testenv.Create(t, k8s, rr, dep)
	c := waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonRolloutFailed, "has timed out progressing", 0)
	// The pods of both templates are Pending: none runs the config.
	if !strings.Contains(c.Message, "0/") || !strings.Contains(c.Message, " router pods run ") {
		t.Errorf("Programmed says %q; want the count too", c.Message)
	}
	res := kstatusOf(t, rr)
	if res.Status != status.FailedStatus || !strings.Contains(res.Message, "has timed out progressing") {
		t.Errorf("kstatus reads %s: %s; want Failed with the Deployment's message", res.Status, res.Message)
	}
}

// TestNotOptedInIsNeverWritten: a router Deployment without the
// router-container annotation is a sidecar router's: the manager compiles
// and reports, and never writes the Deployment.
func TestNotOptedInIsNeverWritten(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 2)
	delete(dep.Annotations, v1alpha1.RouterContainerAnnotation)
	testenv.Create(t, k8s, rr, dep)
	// Sidecar mode: the pods run no sidecar that reports a hash.
	waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/2 router pods run", rr.Generation)
	testenv.Eventually(t, timeout, "the Deployment's pods running", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		if dep.Status.ReadyReplicas != 2 {
			return fmt.Errorf("%d ready", dep.Status.ReadyReplicas)
		}
		return nil
	})
	// A change to the role is another compile and another chance to write.
	gen := setTTL(t, rr, retain(120))
	waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/2 router pods run", gen)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if dep.Generation != 1 || policyConfigMap(&dep.Spec.Template.Spec) != "" {
		t.Errorf("Deployment at generation %d mounting %s; want it untouched", dep.Generation, policyConfigMap(&dep.Spec.Template.Spec))
	}
	for _, mf := range dep.ManagedFields {
		if strings.HasPrefix(mf.Manager, "kvhint") {
			t.Errorf("the manager wrote the Deployment as %s: %s", mf.Manager, mf.FieldsV1.GetRawString())
		}
	}
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns), client.HasLabels{v1alpha1.ConfigHashLabel}); err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 0 {
		t.Errorf("%d config revisions written for a sidecar router", len(cms.Items))
	}
}

// TestRoundRobinTemplateRefusesHints: the role says routerMode kv, but the
// router's pod template starts it with --router-mode round-robin, which
// is what will run: a role with hints is refused, naming the flag, its
// value and the container; nothing is rolled. The role was accepted
// before the Deployment came (a sidecar router then, under kv): that last
// good entry does not run either, since the router's mode refuses it.
func TestRoundRobinTemplateRefusesHints(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	testenv.Create(t, k8s, rr)
	testenv.Eventually(t, timeout, "Accepted=True before the Deployment", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionAccepted)); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Accepted: %+v", c)
		}
		return nil
	})
	dep := testenv.RouterDeployment(ns, "llama", 1, "--router-mode", "round-robin")
	testenv.Create(t, k8s, dep)
	testenv.Eventually(t, timeout, "Accepted=False HintsRequireKVMode", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if c == nil || c.Reason != string(v1alpha1.ReasonHintsRequireKVMode) ||
			!strings.Contains(c.Message, `--router-mode of container "frontend" of Deployment llama-frontend is "round-robin"`) {
			return fmt.Errorf("Accepted: %+v", c)
		}
		return nil
	})
	if res := kstatusOf(t, rr); res.Status != status.FailedStatus {
		t.Errorf("kstatus reads %s, want Failed", res.Status)
	}
	waitProgrammed(t, rr, metav1.ConditionFalse, v1alpha1.ReasonNotAccepted, "nothing of the role runs", 0)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if got := policyConfigMap(&dep.Spec.Template.Spec); got != "" {
		t.Errorf("the Deployment was pointed at %s although no role is accepted", got)
	}
}

// TestRevisionsCollected: revisions no ReplicaSet names any more are
// removed; with a revision history of one, the third change removes the
// first revision.
func TestRevisionsCollected(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 1)
	dep.Spec.RevisionHistoryLimit = ptrTo(int32(1))
	testenv.Create(t, k8s, rr, dep)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "1/1 router pods run ", rr.Generation)
	first := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	for _, ttl := range []int{120, 180} {
		gen := setTTL(t, rr, retain(ttl))
		waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "1/1 router pods run ", gen)
	}
	testenv.Eventually(t, timeout, "the first revision collected", func(ctx context.Context) error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("ConfigMap %s still there (%v)", first, err)
	})
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns), client.HasLabels{v1alpha1.ConfigHashLabel}); err != nil {
		t.Fatal(err)
	}
	var rss appsv1.ReplicaSetList
	if err := k8s.List(context.Background(), &rss, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss.Items {
		name := policyConfigMap(&rs.Spec.Template.Spec)
		found := false
		for _, cm := range cms.Items {
			found = found || cm.Name == name
		}
		if !found && strings.HasPrefix(name, "llama-hints-") {
			t.Errorf("ReplicaSet %s mounts %s, which was deleted", rs.Name, name)
		}
	}
}

// TestSampleRolls applies config/samples/dynamo-router as it ships, with
// only the fake node added (no scheduler runs here), and waits for both
// pods on the compiled config, in the released form a Dynamo Frontend
// reads (the router's target: its catalog declares no form).
func TestSampleRolls(t *testing.T) {
	ns := newBareNamespace(t) // the sample declares its build
	rr := applySample(t, ns, filepath.Join("..", "..", "config", "samples", "dynamo-router", "router.yaml"), func(u *unstructured.Unstructured) {
		if u.GetKind() == "Deployment" {
			if err := unstructured.SetNestedField(u.Object, node, "spec", "template", "spec", "nodeName"); err != nil {
				t.Fatal(err)
			}
		}
	})
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", 0)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 2, rev)
	requireReleasedFile(t, ns, rev)
}

// requireReleasedFile fails unless revision rev holds a policy file a
// released Dynamo Frontend reads (dynamopolicy.CheckReleased, the model
// of its parser), marked as the released form for the sidecar.
func requireReleasedFile(t *testing.T, ns, rev string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rev}, cm); err != nil {
		t.Fatal(err)
	}
	file := cm.Data[v1alpha1.HintsConfigKey]
	if err := dynamopolicy.CheckReleased([]byte(file)); err != nil {
		t.Errorf("revision %s: a released Frontend refuses its policy file: %v\n%s", rev, err, file)
	}
	if got := cm.Data[compiled.FormKey]; got != "RouterWideHint" {
		t.Errorf("revision %s: %s is %q, want RouterWideHint", rev, compiled.FormKey, got)
	}
}

// applySample creates every object of a sample manifest in namespace ns,
// each after edit, and returns its RouterRole.
func applySample(t *testing.T, ns, file string, edit func(u *unstructured.Unstructured)) *v1alpha1.RouterRole {
	t.Helper()
	for _, u := range testenv.MustCreateFile(t, k8s, ns, file, edit) {
		if u.GetKind() == "RouterRole" {
			return &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.GetName()}}
		}
	}
	t.Fatalf("%s has no RouterRole", file)
	return nil
}

// TestRevisionsOutliveRoles: a revision is the Deployment's, not the
// RouterRoles': with the last RouterRole gone the pods' next start still
// finds its file; the garbage collector removes it with the Deployment.
func TestRevisionsOutliveRoles(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	dep := testenv.RouterDeployment(ns, "llama", 1)
	testenv.Create(t, k8s, rr, dep)
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "1/1 router pods run ", rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))

	if err := k8s.Delete(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the manager removing llama-hints with its last RouterRole", func(ctx context.Context) error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.HintsConfigMapName("llama")}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rev}, cm); err != nil {
		t.Fatalf("revision %s, which the Deployment mounts, is gone with the RouterRole: %v", rev, err)
	}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != dep.UID {
		t.Fatalf("revision %s is owned by %+v; want the Deployment alone", rev, cm.OwnerReferences)
	}

	if err := k8s.Delete(context.Background(), dep, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the garbage collector removing the revision with the Deployment", func(ctx context.Context) error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: rev}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// TestStockFrontend: router llama declares no catalog, so its Frontend is
// a stock Dynamo build. A role that lists kv-retain is refused with
// UnknownHintType and nothing of it is written; a role on a stock type
// with no hints goes Programmed 2/2, its pods rolled onto a file that
// Dynamo's own checks start a stock Frontend on (released form, no
// kv_hint_policy).
func TestStockFrontend(t *testing.T) {
	ns := newBareNamespace(t)
	retaining := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	plain := &v1alpha1.RouterRole{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prefill"},
		Spec: v1alpha1.RouterRoleSpec{
			Router: "llama", Role: v1alpha1.RolePrefill,
			WorkerSelection: v1alpha1.WorkerSelection{Type: "dynamo-two-tier-cost-fn"},
			Hints:           []v1alpha1.HintItem{},
		},
	}
	testenv.Create(t, k8s, retaining, plain, testenv.RouterDeployment(ns, "llama", 2))
	waitProgrammed(t, plain, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run ", plain.Generation)
	testenv.Eventually(t, timeout, "decode refused with UnknownHintType", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(retaining), retaining); err != nil {
			return err
		}
		c := meta.FindStatusCondition(retaining.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(v1alpha1.ReasonUnknownHintType) || !strings.Contains(c.Message, "stock Dynamo build") {
			return fmt.Errorf("Accepted: %+v", c)
		}
		return nil
	})
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, plain))
	requirePodsOn(t, ns, 2, rev)
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rev}, cm); err != nil {
		t.Fatal(err)
	}
	doc := []byte(cm.Data[v1alpha1.HintsConfigKey])
	if _, probs := hintsconfig.CompileFor(builtin.NewCatalog(), doc, hintsconfig.TargetDynamo, hintsconfig.Modes{}); probs.HasErrors() {
		t.Errorf("a stock Frontend refuses %s: %v\n%s", rev, probs, doc)
	}
	if err := dynamopolicy.CheckReleased(doc); err != nil {
		t.Errorf("a released Frontend refuses %s: %v\n%s", rev, err, doc)
	}
	if bytes.Contains(doc, []byte("kv_hint_policy")) || !bytes.Contains(doc, []byte("prefill: prefill")) {
		t.Errorf("%s holds:\n%s\nwant the prefill instance and no kv_hint_policy", rev, doc)
	}
}
