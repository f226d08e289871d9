package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/argocd"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// gitopsView is what the GitOps tools make of one object: kstatus (Flux's
// health checks, kpt) and the Argo CD health check of config/argocd.
type gitopsView struct {
	kstatus        status.Status
	kstatusReason  string // the reason of kstatus's Stalled or Reconciling condition, if any
	kstatusMessage string
	argo           string
	argoMessage    string
}

func (v gitopsView) String() string {
	return fmt.Sprintf("kstatus %s (%s: %s); Argo CD %s: %s", v.kstatus, v.kstatusReason, v.kstatusMessage, v.argo, v.argoMessage)
}

// readGitops reads obj back from the API server as unstructured, the way
// Flux's and Argo CD's caches hold it, and computes both views.
func readGitops(t *testing.T, ns, name, kind string) gitopsView {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("reading %s %s: %v", kind, name, err)
	}
	return gitopsOf(t, u)
}

func gitopsOf(t *testing.T, u *unstructured.Unstructured) gitopsView {
	t.Helper()
	res, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus on %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	v := gitopsView{kstatus: res.Status, kstatusMessage: res.Message}
	if len(res.Conditions) > 0 {
		v.kstatusReason = res.Conditions[0].Reason
	}
	v.argo, v.argoMessage, err = argocd.Health(filepath.Join("..", "config", "argocd"), u)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// expectGitops checks a view against what it should be: reason, when
// set, is kstatus's condition reason and starts Argo CD's message;
// message, when set, is in Argo CD's message and in kstatus's unless
// Current.
func expectGitops(t *testing.T, what string, got gitopsView, kstatus status.Status, argo, reason, message string) {
	t.Helper()
	ok := got.kstatus == kstatus && got.argo == argo
	if reason != "" {
		ok = ok && got.kstatusReason == reason && strings.HasPrefix(got.argoMessage, reason+": ")
	}
	if message != "" {
		// kstatus says only "Resource is Ready" when Current.
		ok = ok && strings.Contains(got.argoMessage, message) && (kstatus == status.CurrentStatus || strings.Contains(got.kstatusMessage, message))
	}
	if !ok {
		t.Errorf("%s: got %s\nwant kstatus %s, Argo CD %s, reason %q, message containing %q", what, got, kstatus, argo, reason, message)
	}
}

// waitGitops waits until the object's views settle on the expected ones
// for its current generation.
func waitGitops(t *testing.T, ns, name, kind string, kstatus status.Status, argo, reason, message string) gitopsView {
	t.Helper()
	var got gitopsView
	testenv.Eventually(t, timeout, fmt.Sprintf("%s %s: kstatus %s, Argo CD %s, reason %s", kind, name, kstatus, argo, reason), func(context.Context) error {
		got = readGitops(t, ns, name, kind)
		if got.kstatus != kstatus || got.argo != argo || (reason != "" && got.kstatusReason != reason) ||
			(message != "" && !strings.Contains(got.argoMessage, message)) {
			return fmt.Errorf("%s", got)
		}
		return nil
	})
	expectGitops(t, kind+" "+name, got, kstatus, argo, reason, message)
	return got
}

// gitopsCase is one object and what GitOps tools must make of it once the
// manager has processed it.
type gitopsCase struct {
	name, file, kind, object string
	kstatus                  status.Status
	argo                     string
	reason                   string
	message                  string
	ns                       string
}

// TestGitopsStatus runs kstatus and the Argo CD health checks on objects
// served by the API server, for every condition reason: before the
// manager has processed them, after, and right after a change.
func TestGitopsStatus(t *testing.T) {
	testenv.Get(t)
	var cases []*gitopsCase
	for _, s := range invalidSamples {
		if s.rejected != "" {
			continue
		}
		c := &gitopsCase{name: s.file + "/" + s.object, file: s.file, kind: "RouterRole", object: s.object,
			kstatus: status.FailedStatus, argo: "Degraded", reason: string(s.reason)}
		if s.policy {
			c.kind = "HintPolicy"
		}
		if r, ok := s.also[v1alpha1.ConditionAccepted]; ok {
			c.reason = string(r) // Stalled carries Ready's reason: the first failing condition's
		}
		if s.condition == v1alpha1.ConditionResolvedRefs || len(s.also) > 0 {
			// The message names every failing condition.
			c.message = string(s.condition) + "=False (" + string(s.reason) + ")"
		}
		cases = append(cases, c)
	}

	// Valid objects: a role that waits for its router pods, one whose pods
	// do not run its config yet, one that runs everywhere, and a HintPolicy.
	noPods := &gitopsCase{name: "no-router-pods", kind: "RouterRole", object: "lonely",
		kstatus: status.InProgressStatus, argo: "Progressing", reason: string(v1alpha1.ReasonNoRouterPods), message: "no router pods"}
	pending := &gitopsCase{name: "pending", kind: "RouterRole", object: "pending",
		kstatus: status.InProgressStatus, argo: "Progressing", reason: string(v1alpha1.ReasonPending), message: "0/1 router pods run"}
	ready := &gitopsCase{name: "ready", kind: "RouterRole", object: "ready",
		kstatus: status.CurrentStatus, argo: "Healthy", message: "1/1 router pods run"}
	policy := &gitopsCase{name: "hintpolicy-accepted", kind: "HintPolicy", object: "retain",
		kstatus: status.CurrentStatus, argo: "Healthy"}
	unknownType := &gitopsCase{name: "hintpolicy-unknown-type", kind: "HintPolicy", object: "teleport",
		kstatus: status.FailedStatus, argo: "Degraded", reason: string(v1alpha1.ReasonUnknownHintType), message: `"kv-teleport" is not linked`}
	cases = append(cases, noPods, pending, ready, policy, unknownType)

	// Everything is created while the manager is stopped, so that the
	// first read is certainly before the manager processed anything.
	stopManager()
	restarted := false
	defer func() {
		if !restarted {
			var err error
			if stopManager, err = startManager(); err != nil {
				t.Fatalf("restarting the manager: %v", err)
			}
		}
	}()
	files := map[string]string{}
	for _, c := range cases {
		if c.file != "" {
			if ns, ok := files[c.file]; ok {
				c.ns = ns
				continue
			}
			c.ns = testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
			files[c.file] = c.ns
			if _, err := testenv.CreateFile(t, k8s, c.ns, filepath.Join("..", "config", "samples", "invalid", c.file)); err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			continue
		}
		if c == policy {
			continue // created with ready, in its namespace
		}
		c.ns = testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
		switch c {
		case noPods:
			testenv.Create(t, k8s, newRole(c.ns, c.object, "r", "decode", "dynamo-default-cost-fn"))
		case pending:
			testenv.Create(t, k8s, newRole(c.ns, c.object, "r", "decode", "dynamo-default-cost-fn"))
			testenv.CreateRouterPod(t, k8s, c.ns, "r", "r-0", "")
		case ready:
			rr := newRole(c.ns, c.object, "r", "prefill", "kvcr")
			rr.Spec.Hints = []v1alpha1.HintItem{testenv.Hint("kv-fetch", nil), testenv.PolicyRef("retain")}
			testenv.Create(t, k8s, rr, testenv.HintPolicy(c.ns, "retain", "kv-retain", map[string]any{"ttl_seconds": 60}))
			policy.ns = c.ns
		case unknownType:
			testenv.Create(t, k8s, testenv.HintPolicy(c.ns, c.object, "kv-teleport", nil))
		}
	}
	for _, c := range cases {
		got := readGitops(t, c.ns, c.object, c.kind)
		expectGitops(t, c.name+", not yet processed", got, status.InProgressStatus, "Progressing", "", "")
		if !strings.Contains(got.kstatusMessage, "generation is 1, but latest observed generation is 0") {
			t.Errorf("%s, not yet processed: kstatus says %q; want it to name the unobserved generation", c.name, got.kstatusMessage)
		}
	}

	var err error
	if stopManager, err = startManager(); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}
	restarted = true
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c == ready {
				cm := testenv.WaitConfigMap(t, k8s, timeout, c.ns, "r", nil)
				testenv.CreateRouterPod(t, k8s, c.ns, "r", "r-0", cm.Annotations[v1alpha1.HashAnnotation])
			}
			waitGitops(t, c.ns, c.object, c.kind, c.kstatus, c.argo, c.reason, c.message)
		})
	}

	// A valid change, then an invalid one, to the role that is Ready: each
	// reads as InProgress before the manager processes it, although the
	// Ready condition of the previous generation is still there.
	stopManager()
	restarted = false
	rr := get(t, ready.ns, ready.object, &v1alpha1.RouterRole{})
	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints[0] = testenv.Hint("kv-fetch", map[string]any{"min_blocks": 8})
	})
	got := readGitops(t, ready.ns, ready.object, "RouterRole")
	expectGitops(t, "a valid change, not yet processed", got, status.InProgressStatus, "Progressing", "", "")
	if got.kstatusReason != "LatestGenerationNotObserved" || !strings.Contains(got.kstatusMessage, "generation is 2, but latest observed generation is 1") ||
		!strings.Contains(got.argoMessage, "generation 2") {
		t.Errorf("a valid change, not yet processed: got %s; want both to name generation 2 as not yet processed", got)
	}
	if c := conditionOf(t, ready.ns, ready.object, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready of generation 1 is %s; the test needs the stale True in place", c.Status)
	}
	hp := get(t, policy.ns, policy.object, &v1alpha1.HintPolicy{})
	update(t, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = testenv.Params(map[string]any{"ttl_seconds": 120}) })
	got = readGitops(t, policy.ns, policy.object, "HintPolicy")
	expectGitops(t, "a HintPolicy change, not yet processed", got, status.InProgressStatus, "Progressing", "", "")
	if got.kstatusReason != "LatestGenerationNotObserved" || !strings.Contains(got.argoMessage, "generation 2") {
		t.Errorf("a HintPolicy change, not yet processed: got %s; want both to name generation 2 as not yet processed", got)
	}
	if stopManager, err = startManager(); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}
	restarted = true
	// Processed: accepted, but the router pod runs the old config.
	waitGitops(t, ready.ns, ready.object, "RouterRole", status.InProgressStatus, "Progressing", string(v1alpha1.ReasonPending), "0/1 router pods run")
	cm := testenv.WaitConfigMap(t, k8s, timeout, ready.ns, "r", func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "min_blocks: 8") {
			return fmt.Errorf("not compiled yet")
		}
		return nil
	})
	testenv.ReportHash(t, k8s, get(t, ready.ns, "r-0", &corev1.Pod{}), cm.Annotations[v1alpha1.HashAnnotation])
	waitGitops(t, ready.ns, ready.object, "RouterRole", status.CurrentStatus, "Healthy", "", "1/1 router pods run")
	waitGitops(t, policy.ns, policy.object, "HintPolicy", status.CurrentStatus, "Healthy", "", "")

	// An invalid change: two KV-copy senders. It fails at once, with the
	// reason, while the router keeps running generation 3's predecessor.
	update(t, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = append(rr.Spec.Hints, testenv.NamedHint("fetch-again", "kv-fetch", nil))
	})
	waitGitops(t, ready.ns, ready.object, "RouterRole", status.FailedStatus, "Degraded",
		string(v1alpha1.ReasonKVCopySenderDuplicate), "The router keeps running generation 2")
}

// conditionOf returns one condition of a RouterRole as the API server holds it.
func conditionOf(t *testing.T, ns, name string, typ v1alpha1.ConditionType) metav1.Condition {
	t.Helper()
	rr := get(t, ns, name, &v1alpha1.RouterRole{})
	for _, c := range rr.Status.Conditions {
		if c.Type == string(typ) {
			return c
		}
	}
	t.Fatalf("RouterRole %s has no %s condition", name, typ)
	return metav1.Condition{}
}
