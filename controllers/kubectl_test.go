package controllers_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestKubectlWaitReady runs `kubectl wait --for=condition=Ready` against
// the test API server. It must not return while the router has no pod
// running the config, and must return once one does.
func TestKubectlWaitReady(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	rr := newRole(ns, "llama-prefill", "llama", "prefill", "kvcr")
	testenv.Create(t, k8s, rr)
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "llama", nil)
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNoRouterPods)})

	// Not Ready: kubectl wait times out and says so.
	out, err := testenv.Get(t).RunKubectl("wait", "-n", ns, "--for=condition=Ready", "rr/llama-prefill", "--timeout=1s")
	if err == nil {
		t.Fatalf("kubectl wait returned at once for a role no router pod runs: %s", out)
	}

	// Started before the router pod reports, it returns when it does.
	done := make(chan error, 1)
	var waitOut string
	go func() {
		var err error
		waitOut, err = testenv.Get(t).RunKubectl("wait", "-n", ns, "--for=condition=Ready", "rr/llama-prefill", "--timeout=60s")
		done <- err
	}()
	testenv.CreateRouterPod(t, k8s, ns, "llama", "llama-router-0", cm.Annotations[v1alpha1.HashAnnotation])
	if err := <-done; err != nil {
		t.Fatalf("kubectl wait: %v: %s", err, waitOut)
	}
	if want := "routerrole.hints.kvrouter.io/llama-prefill condition met"; waitOut != want {
		t.Errorf("kubectl wait said %q; want %q", waitOut, want)
	}

	// The printer columns say the same.
	out, err = testenv.Get(t).RunKubectl("get", "-n", ns, "rr", "llama-prefill", "--no-headers")
	if err != nil {
		t.Fatalf("kubectl get: %v: %s", err, out)
	}
	if f := strings.Fields(out); len(f) < 7 || f[0] != "llama-prefill" || f[1] != "llama" || f[2] != "prefill" || f[3] != "kv" || f[4] != "kvcr" || f[5] != "True" || f[6] != "1/1" {
		t.Errorf("kubectl get rr: %q; want NAME ROUTER ROLE MODE SELECTION READY PROGRAMMED AGE = llama-prefill llama prefill kv kvcr True 1/1 ...", out)
	}
}
