package controllers_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestProgrammedCountsRouterPods runs three router pods through their
// reports: Programmed counts those that run the current hash, ignores pods
// of other routers and pods being deleted, and turns True at 3/3.
func TestProgrammedCountsRouterPods(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "decode", "count", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	cm := waitConfigMap(t, ns, "count", anyConfigMap)
	hash := cm.Annotations[v1alpha1.HashAnnotation]

	c := waitCondition(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonNoRouterPods)
	if want := fmt.Sprintf("ConfigMap count-hints holds config %s, but no router pods (label hints.kvrouter.io/router=count) run it yet", hash); c.Message != want {
		t.Errorf("Programmed message %q; want %q", c.Message, want)
	}

	var pods []*corev1.Pod
	for i := range 3 {
		pods = append(pods, routerPod(t, ns, "count", fmt.Sprintf("count-router-%d", i), ""))
	}
	routerPod(t, ns, "elsewhere", "elsewhere-router-0", hash)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/3 router pods run "+hash)

	reportHash(t, pods[0], "0123456789abcdef") // an older config
	reportHash(t, pods[1], hash)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "1/3 router pods run "+hash)
	reportHash(t, pods[0], hash)
	reportHash(t, pods[2], hash)
	c = waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run "+hash)
	if c.ObservedGeneration != rr.Generation {
		t.Errorf("Programmed observedGeneration %d; want %d", c.ObservedGeneration, rr.Generation)
	}
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if got := rr.Status.RouterPods; got == nil || *got != (v1alpha1.RouterPods{Hash: hash, Total: 3, UpToDate: 3, Summary: "3/3"}) {
		t.Errorf("routerPods %+v; want 3/3 at %s", got, hash)
	}

	// A pod that goes (unscheduled pods are deleted at once) leaves 2/2.
	if err := k8s.Delete(context.Background(), pods[2]); err != nil {
		t.Fatal(err)
	}
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run "+hash)

	// A new config needs the pods to report it again.
	update(t, rr, func(rr *v1alpha1.RouterRole) { rr.Spec.Hints = []v1alpha1.HintItem{} })
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/2 router pods run")
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPending)
}

// TestTerminatedPodsNotCounted: a router pod that failed (evicted, say)
// stays in the API with the hash it ran last; it is not a router pod that
// could run the config, so it does not hold Programmed back.
func TestTerminatedPodsNotCounted(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "decode", "evict", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	hash := waitConfigMap(t, ns, "evict", anyConfigMap).Annotations[v1alpha1.HashAnnotation]
	routerPod(t, ns, "evict", "evict-router-0", hash)
	old := routerPod(t, ns, "evict", "evict-router-1", "0123456789abcdef")
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "1/2 router pods")

	old.Status.Phase = corev1.PodFailed
	old.Status.Reason = "Evicted"
	if err := k8s.Status().Update(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "1/1 router pods")
}

// TestProgrammedEventsForANewRole: a new role on a router that has pods
// waits for them quietly (no Pending event) and gets one Programmed event
// when they run its config.
func TestProgrammedEventsForANewRole(t *testing.T) {
	ns := newNamespace(t)
	pod := routerPod(t, ns, "quiet", "quiet-router-0", "")
	rr := newRole(ns, "decode", "quiet", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/1 router pods run")
	cm := waitConfigMap(t, ns, "quiet", anyConfigMap)
	reportHash(t, pod, cm.Annotations[v1alpha1.HashAnnotation])
	waitCondition(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed)
	eventually(t, "one Programmed event", func(ctx context.Context) error {
		n, err := countEvents(ctx, ns, rr.Name, string(v1alpha1.ReasonProgrammed))
		if err == nil && n != 1 {
			err = fmt.Errorf("%d Programmed events", n)
		}
		return err
	})
	// Events go out in order through one recorder: the Pending one, had
	// it been recorded, would be in by now.
	if n, err := countEvents(context.Background(), ns, rr.Name, string(v1alpha1.ReasonPending)); err != nil || n != 0 {
		t.Errorf("%d Pending events (%v); want none for a new role waiting for its pods", n, err)
	}
}

// TestForgedAppliedHashIgnored is the manager's half of issue item 1: an
// applied-hash written on a router pod by anything but the sidecar's field
// manager (here kubectl annotate's) is not counted. A second router pod is
// created after the forgery, so by the time the manager counts two pods it
// has seen the forgery too: 0/2, where a counted forgery reads 1/2.
func TestForgedAppliedHashIgnored(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "decode", "forged", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	hash := waitConfigMap(t, ns, "forged", anyConfigMap).Annotations[v1alpha1.HashAnnotation]
	forged := routerPod(t, ns, "forged", "forged-router-0", "")
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/1 router pods run "+hash)

	annotatePod(t, forged, hash, "kubectl-annotate")
	honest := routerPod(t, ns, "forged", "forged-router-1", "")
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "0/2 router pods run "+hash)
	reportHash(t, honest, hash)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "1/2 router pods run "+hash)

	// The forged pod's own sidecar reports. Reporting the value already
	// there would be a no-op patch that leaves the annotation kubectl's
	// (the pod stays uncounted until the next config: failing safe); a
	// report that changes the value makes it the sidecar's.
	reportHash(t, forged, "0123456789abcdef")
	reportHash(t, forged, hash)
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "2/2 router pods run "+hash)
}
