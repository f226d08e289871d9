package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestPolicyEjectedNamesThePolicy: a router pod's sidecar that reports a
// hint policy ejected (hints.kvrouter.io/ejected-policies) makes the
// RouterRole's PolicyEjected True, naming the policy, on how many pods and
// why; Ready stays True. The same annotation written by another field
// manager is ignored, and the condition goes once the sidecar clears it.
func TestPolicyEjectedNamesThePolicy(t *testing.T) {
	ns := newNamespace(t)
	rr := newRole(ns, "decode", "eject", "decode", "dynamo-default-cost-fn")
	rr.Spec.Hints = []v1alpha1.HintItem{named("audit", "kv-retain", map[string]any{"ttl_seconds": 600}), inline("kv-evict", nil)}
	create(t, rr)
	hash := waitConfigMap(t, ns, "eject", anyConfigMap).Annotations[v1alpha1.HashAnnotation]
	pods := []*corev1.Pod{routerPod(t, ns, "eject", "eject-router-0", hash), routerPod(t, ns, "eject", "eject-router-1", hash)}
	waitCondition(t, rr, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	// Forged: not the sidecar's field manager. A later honest report on
	// the other pod shows the manager has seen the forgery by then.
	reportEjected(t, pods[1], "decode/audit=busy", "kubectl-annotate")
	reportEjected(t, pods[0], "decode/audit=overrun", v1alpha1.SidecarFieldManager)
	c := waitConditionMessage(t, rr, v1alpha1.ConditionPolicyEjected, metav1.ConditionTrue, v1alpha1.ReasonPolicyEjected,
		"hint policy audit is ejected on 1/2 router pods (overrun)")
	t.Logf("PolicyEjected: %s", c.Message)
	if r := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionReady)); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v while a policy is ejected; want True (the spec runs on every pod)", r)
	}
	v := readGitops(t, ns, rr.Name, "RouterRole")
	if v.kstatus != status.CurrentStatus || v.argo != "Healthy" || !strings.Contains(v.argoMessage, "PolicyEjected: hint policy audit is ejected") {
		t.Errorf("GitOps view while a policy is ejected: %v; want kstatus Current, Argo CD Healthy naming the policy", v)
	}

	reportEjected(t, pods[1], "decode/audit=abandoned", v1alpha1.SidecarFieldManager)
	waitConditionMessage(t, rr, v1alpha1.ConditionPolicyEjected, metav1.ConditionTrue, v1alpha1.ReasonPolicyEjected,
		"hint policy audit is ejected on 2/2 router pods (abandoned, overrun)")

	for _, p := range pods {
		reportEjected(t, p, "", v1alpha1.SidecarFieldManager)
	}
	eventually(t, "PolicyEjected gone", func(ctx context.Context) error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionPolicyEjected)); c != nil {
			return fmt.Errorf("PolicyEjected still there: %s", c.Message)
		}
		return nil
	})
}

// reportEjected writes (or, for "", removes) the ejected-policies
// annotation as fieldManager.
func reportEjected(t *testing.T, pod *corev1.Pod, value, fieldManager string) {
	t.Helper()
	var body string
	if value == "" {
		body = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, v1alpha1.EjectedPoliciesAnnotation)
	} else {
		body = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.EjectedPoliciesAnnotation, value)
	}
	if err := k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", []byte(body)), client.FieldOwner(fieldManager)); err != nil {
		t.Fatalf("annotating pod %s: %v", pod.Name, err)
	}
}
