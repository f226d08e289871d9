package gitops_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/gitopsview"
	"github.com/kvrouter/kv-hint-operator/internal/testing/invalidsamples"
	"github.com/kvrouter/kv-hint-operator/internal/testing/managertest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// timeout bounds every wait on the manager.
const timeout = 30 * time.Second

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
// manager has processed them, after, and right after a change. The test
// runs the manager itself, stopped while it creates or changes what must
// read as not yet processed.
func TestGitopsStatus(t *testing.T) {
	env := testenv.Get(t)
	k8s := env.Client
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {}
	startManager := func() {
		t.Helper()
		var err error
		if stop, err = managertest.Start(env.Config, managertest.Options{Name: "gitops", Scheme: scheme, Restartable: true}); err != nil {
			t.Fatalf("starting the manager: %v", err)
		}
	}
	t.Cleanup(func() { stop() })
	stopManager := func() {
		stop()
		stop = func() {}
	}

	var cases []*gitopsCase
	for _, s := range invalidsamples.All {
		if s.Rejected != "" {
			continue
		}
		c := &gitopsCase{name: s.File + "/" + s.Object, file: s.File, kind: "RouterRole", object: s.Object,
			kstatus: status.FailedStatus, argo: "Degraded", reason: string(s.Reason)}
		if s.Policy {
			c.kind = "HintPolicy"
		}
		if r, ok := s.Also[v1alpha1.ConditionAccepted]; ok {
			c.reason = string(r) // Stalled carries Ready's reason: the first failing condition's
		}
		if s.Condition == v1alpha1.ConditionResolvedRefs || len(s.Also) > 0 {
			// The message names every failing condition.
			c.message = string(s.Condition) + "=False (" + string(s.Reason) + ")"
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

	// Everything is created before the manager starts, so that the first
	// read is certainly before the manager processed anything.
	files := map[string]string{}
	for _, c := range cases {
		if c.file != "" {
			if ns, ok := files[c.file]; ok {
				c.ns = ns
				continue
			}
			c.ns = testenv.NewNamespace(t, k8s, "kvhint-test")
			files[c.file] = c.ns
			testenv.MustCreateFile(t, k8s, c.ns, filepath.Join(env.Repo, invalidsamples.Dir, c.file))
			continue
		}
		if c == policy {
			continue // created with ready, in its namespace
		}
		c.ns = testenv.NewNamespace(t, k8s, "kvhint-test")
		switch c {
		case noPods:
			testenv.Create(t, k8s, testenv.RouterRole(c.ns, c.object, "r", "decode"))
		case pending:
			testenv.Create(t, k8s, testenv.RouterRole(c.ns, c.object, "r", "decode"))
			testenv.CreateRouterPod(t, k8s, c.ns, "r", "r-0", "")
		case ready:
			rr := testenv.RouterRole(c.ns, c.object, "r", "prefill", testenv.Hint("kv-fetch", nil), testenv.PolicyRef("retain"))
			rr.Spec.WorkerSelection.Type = "kvcr"
			testenv.Create(t, k8s, rr, testenv.HintPolicy(c.ns, "retain", "kv-retain", map[string]any{"ttl_seconds": 60}))
			policy.ns = c.ns
		case unknownType:
			testenv.Create(t, k8s, testenv.HintPolicy(c.ns, c.object, "kv-teleport", nil))
		}
	}
	for _, c := range cases {
		got := gitopsview.Read(t, k8s, c.ns, c.object, c.kind)
		gitopsview.Expect(t, c.name+", not yet processed", got, status.InProgressStatus, "Progressing", "", "")
		if !strings.Contains(got.KStatusMessage, "generation is 1, but latest observed generation is 0") {
			t.Errorf("%s, not yet processed: kstatus says %q; want it to name the unobserved generation", c.name, got.KStatusMessage)
		}
	}

	startManager()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c == ready {
				cm := testenv.WaitConfigMap(t, k8s, timeout, c.ns, "r", nil)
				testenv.CreateRouterPod(t, k8s, c.ns, "r", "r-0", cm.Annotations[v1alpha1.HashAnnotation])
			}
			gitopsview.Wait(t, k8s, timeout, c.ns, c.object, c.kind, c.kstatus, c.argo, c.reason, c.message)
		})
	}

	// A valid change, then an invalid one, to the role that is Ready: each
	// reads as InProgress before the manager processes it, although the
	// Ready condition of the previous generation is still there.
	stopManager()
	rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: ready.ns, Name: ready.object}}
	testenv.Update(t, k8s, timeout, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints[0] = testenv.Hint("kv-fetch", map[string]any{"min_blocks": 8})
	})
	got := gitopsview.Read(t, k8s, ready.ns, ready.object, "RouterRole")
	gitopsview.Expect(t, "a valid change, not yet processed", got, status.InProgressStatus, "Progressing", "", "")
	if got.KStatusReason != "LatestGenerationNotObserved" || !strings.Contains(got.KStatusMessage, "generation is 2, but latest observed generation is 1") ||
		!strings.Contains(got.ArgoMessage, "generation 2") {
		t.Errorf("a valid change, not yet processed: got %s; want both to name generation 2 as not yet processed", got)
	}
	if c := conditionOf(t, k8s, ready.ns, ready.object, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready of generation 1 is %s; the test needs the stale True in place", c.Status)
	}
	hp := &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: policy.ns, Name: policy.object}}
	testenv.Update(t, k8s, timeout, hp, func(hp *v1alpha1.HintPolicy) { hp.Spec.Parameters = testenv.Params(map[string]any{"ttl_seconds": 120}) })
	got = gitopsview.Read(t, k8s, policy.ns, policy.object, "HintPolicy")
	gitopsview.Expect(t, "a HintPolicy change, not yet processed", got, status.InProgressStatus, "Progressing", "", "")
	if got.KStatusReason != "LatestGenerationNotObserved" || !strings.Contains(got.ArgoMessage, "generation 2") {
		t.Errorf("a HintPolicy change, not yet processed: got %s; want both to name generation 2 as not yet processed", got)
	}
	startManager()
	// Processed: accepted, but the router pod runs the old config.
	gitopsview.Wait(t, k8s, timeout, ready.ns, ready.object, "RouterRole", status.InProgressStatus, "Progressing", string(v1alpha1.ReasonPending), "0/1 router pods run")
	cm := testenv.WaitConfigMap(t, k8s, timeout, ready.ns, "r", func(cm *corev1.ConfigMap) error {
		if !strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "min_blocks: 8") {
			return fmt.Errorf("not compiled yet")
		}
		return nil
	})
	pod := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ready.ns, Name: "r-0"}, pod); err != nil {
		t.Fatal(err)
	}
	testenv.ReportHash(t, k8s, pod, cm.Annotations[v1alpha1.HashAnnotation])
	gitopsview.Wait(t, k8s, timeout, ready.ns, ready.object, "RouterRole", status.CurrentStatus, "Healthy", "", "1/1 router pods run")
	gitopsview.Wait(t, k8s, timeout, policy.ns, policy.object, "HintPolicy", status.CurrentStatus, "Healthy", "", "")

	// An invalid change: two KV-copy senders. It fails at once, with the
	// reason, while the router keeps running generation 3's predecessor.
	testenv.Update(t, k8s, timeout, rr, func(rr *v1alpha1.RouterRole) {
		rr.Spec.Hints = append(rr.Spec.Hints, testenv.NamedHint("fetch-again", "kv-fetch", nil))
	})
	gitopsview.Wait(t, k8s, timeout, ready.ns, ready.object, "RouterRole", status.FailedStatus, "Degraded",
		string(v1alpha1.ReasonKVCopySenderDuplicate), "The router keeps running generation 2")
}

// conditionOf returns one condition of a RouterRole as the API server holds it.
func conditionOf(t *testing.T, c client.Client, ns, name string, typ v1alpha1.ConditionType) metav1.Condition {
	t.Helper()
	rr := &v1alpha1.RouterRole{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, rr); err != nil {
		t.Fatal(err)
	}
	for _, cond := range rr.Status.Conditions {
		if cond.Type == string(typ) {
			return cond
		}
	}
	t.Fatalf("RouterRole %s has no %s condition", name, typ)
	return metav1.Condition{}
}
