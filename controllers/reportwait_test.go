package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestStatusWaitsForPodReports: a new role on a router whose pod reports
// the config at once (as its sidecar does, within milliseconds) gets one
// status write, Programmed True, not Pending first and True a moment
// later; a router whose pod never reports still gets Pending.
func TestStatusWaitsForPodReports(t *testing.T) {
	requireAPIServer(t)
	ns := newNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	wc, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The sidecar's part: report each config the moment it is written.
	pod := routerPod(t, ns, "prompt", "prompt-router-0", "")
	cms, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer cms.Stop()
	reportLag := make(chan time.Duration, 1)
	go func() {
		for ev := range cms.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type == watch.Deleted || cm.Name != v1alpha1.HintsConfigMapName("prompt") {
				continue
			}
			seen := time.Now()
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
			patch := client.RawPatch("application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AppliedHashAnnotation+`":"`+cm.Annotations[v1alpha1.HashAnnotation]+`"}}}`))
			if err := k8s.Patch(ctx, p, patch, client.FieldOwner(v1alpha1.SidecarFieldManager)); err != nil {
				t.Errorf("reporting the hash: %v", err)
			}
			select {
			case reportLag <- time.Since(seen):
			default:
			}
		}
	}()

	// Every status the role is seen with, in order.
	roles, err := wc.Watch(ctx, &v1alpha1.RouterRoleList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer roles.Stop()
	rr := newRole(ns, "decode", "prompt", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	var programmed []string
	for done := false; !done; {
		select {
		case ev := <-roles.ResultChan():
			got, ok := ev.Object.(*v1alpha1.RouterRole)
			if !ok {
				continue
			}
			c := meta.FindStatusCondition(got.Status.Conditions, string(v1alpha1.ConditionProgrammed))
			if c == nil {
				continue
			}
			programmed = append(programmed, string(c.Status)+"/"+c.Reason)
			done = c.Status == metav1.ConditionTrue
		case <-ctx.Done():
			t.Fatalf("the role was not Programmed; its Programmed conditions so far: %v", programmed)
		}
	}
	lag := <-reportLag
	if lag > 250*time.Millisecond {
		// The pod's report came too late to tell the two behaviours apart
		// (a machine this loaded would see Pending first either way).
		t.Skipf("the stand-in sidecar took %s to report; Programmed went %v", lag, programmed)
	}
	if len(programmed) != 1 {
		t.Errorf("Programmed went %v; want one status write, True (the pod reported within %s)", programmed, lag)
	}

	// A pod that never reports: Pending, within the wait.
	routerPod(t, ns, "silent", "silent-router-0", "")
	silent := newRole(ns, "decode", "silent", "decode", "dynamo-default-cost-fn")
	silent.Name = "silent-decode"
	create(t, silent)
	waitConditionMessage(t, silent, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/1")
}
