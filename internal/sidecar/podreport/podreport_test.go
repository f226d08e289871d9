package podreport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/podreport"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// The package's own suite: the reporter against a real kube-apiserver,
// started at the first test that needs one (the format tests need none).
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{Name: "podreport", Lazy: true}))
}

const wait = 10 * time.Second

// run starts a reporter for ns/name until the test ends, logging to t.
func run(t *testing.T, env *testenv.Env, ns, name string) *podreport.Reporter {
	t.Helper()
	return runLogging(t, env, ns, name, testr.New(t))
}

// runLogging is run with a logger of the test's choice.
func runLogging(t *testing.T, env *testenv.Env, ns, name string, log logr.Logger) *podreport.Reporter {
	t.Helper()
	r := podreport.New(env.Kube, ns, name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of its context's end", wait)
		}
	})
	return r
}

// waitAnnotations waits until the pod's annotations are exactly want.
func waitAnnotations(t *testing.T, env *testenv.Env, ns, name, what string, want map[string]string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testenv.Eventually(t, wait, what, func(ctx context.Context) error {
		var err error
		pod, err = env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d := cmp.Diff(want, pod.Annotations); d != "" {
			return fmt.Errorf("annotations (-want +got):\n%s", d)
		}
		return nil
	})
	return pod
}

func createPod(t *testing.T, env *testenv.Env, ns, name string, annotations map[string]string) {
	t.Helper()
	pod := testenv.RouterPod(ns, name, "r1")
	pod.Annotations = annotations
	testenv.Create(t, env.Client, pod)
}

// TestReportsOnItsOwnPod pins what the reporter writes: the applied hash,
// the ejected policies and the config status, on its own pod only, as the
// sidecar's field manager, beside annotations others wrote; a newer report
// replaces the older; an empty ejected list removes its annotation.
func TestReportsOnItsOwnPod(t *testing.T) {
	env := testenv.Get(t)
	ns := testenv.NewNamespace(t, env.Client, "podreport")
	theirs := map[string]string{"example.com/owner": "someone else"}
	createPod(t, env, ns, "router-0", theirs)
	createPod(t, env, ns, "router-1", theirs)
	r := run(t, env, ns, "router-0")

	r.Report("hash-1")
	pod := waitAnnotations(t, env, ns, "router-0", "the applied hash", map[string]string{
		"example.com/owner": "someone else", wellknown.AppliedHashAnnotation: "hash-1",
	})
	managers := map[string]bool{}
	for _, f := range pod.ManagedFields {
		if f.Operation == metav1.ManagedFieldsOperationUpdate && strings.Contains(f.FieldsV1.GetRawString(), wellknown.AppliedHashAnnotation) {
			managers[f.Manager] = true
		}
	}
	if !managers[wellknown.SidecarFieldManager] || len(managers) != 1 {
		t.Errorf("the applied hash is managed by %v, want only %s", managers, wellknown.SidecarFieldManager)
	}

	r.Report("hash-2")
	r.ReportEjected([]podreport.Ejected{{Role: "decode", Policy: "kv-fetch", Reason: "Panicked"}, {Role: "prefill", Policy: "count", Reason: "TimedOut"}})
	cs := rolloutapi.ConfigStatus{Assigned: "hash-3", Active: "hash-2", LastKnownGood: "hash-2", Error: "role decode: no such policy",
		Candidate: &rolloutapi.CandidateStatus{Assigned: "hash-4", Active: "hash-4", Stage: rolloutapi.StageShadow}}
	r.ReportConfigStatus(cs)
	pod = waitAnnotations(t, env, ns, "router-0", "the hash, ejected policies and config status", map[string]string{
		"example.com/owner":                 "someone else",
		wellknown.AppliedHashAnnotation:     "hash-2",
		wellknown.EjectedPoliciesAnnotation: "decode/kv-fetch=Panicked,prefill/count=TimedOut",
		rolloutapi.ConfigStatusAnnotation:   podreport.FormatConfigStatus(cs),
	})
	var gotCS rolloutapi.ConfigStatus
	if err := json.Unmarshal([]byte(pod.Annotations[rolloutapi.ConfigStatusAnnotation]), &gotCS); err != nil {
		t.Fatalf("the config status annotation is not JSON: %v", err)
	}
	if d := cmp.Diff(cs, gotCS); d != "" {
		t.Errorf("config status read back (-reported +read):\n%s", d)
	}

	r.ReportEjected(nil)
	waitAnnotations(t, env, ns, "router-0", "the ejected policies removed", map[string]string{
		"example.com/owner":               "someone else",
		wellknown.AppliedHashAnnotation:   "hash-2",
		rolloutapi.ConfigStatusAnnotation: podreport.FormatConfigStatus(cs),
	})

	other, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), "router-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(theirs, other.Annotations); d != "" {
		t.Errorf("another pod's annotations changed (-want +got):\n%s", d)
	}
}

// TestClearsAnEarlierRunsEjected pins that a restarted sidecar's first
// write removes the ejected policies an earlier run in the same pod left:
// the dispatcher that ejected them is gone.
func TestClearsAnEarlierRunsEjected(t *testing.T) {
	env := testenv.Get(t)
	ns := testenv.NewNamespace(t, env.Client, "podreport")
	createPod(t, env, ns, "router-0", map[string]string{
		wellknown.AppliedHashAnnotation:     "old-hash",
		wellknown.EjectedPoliciesAnnotation: "decode/kv-fetch=Panicked",
	})
	r := run(t, env, ns, "router-0")
	r.Report("new-hash")
	waitAnnotations(t, env, ns, "router-0", "the new hash, the old ejected list gone", map[string]string{
		wellknown.AppliedHashAnnotation: "new-hash",
	})
}

// TestMissingPodRetried pins what happens while the pod is not there (not
// yet visible, or deleted and re-created under the same name): the
// reporter keeps retrying, a newer report replaces the pending one, and
// the latest is written once the pod exists.
func TestMissingPodRetried(t *testing.T) {
	env := testenv.Get(t)
	ns := testenv.NewNamespace(t, env.Client, "podreport")
	var failures atomic.Int32
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, "Cannot write the report on the pod; retrying") && strings.Contains(args, `pods \"router-0\" not found`) {
			failures.Add(1)
		}
		t.Log(prefix, args)
	}, funcr.Options{})
	r := runLogging(t, env, ns, "router-0", log)
	r.Report("hash-1")
	testenv.Eventually(t, wait, "two failed writes to the missing pod", func(context.Context) error {
		if n := failures.Load(); n < 2 {
			return fmt.Errorf("%d failed writes logged", n)
		}
		return nil
	})
	r.Report("hash-2")
	createPod(t, env, ns, "router-0", nil)
	waitAnnotations(t, env, ns, "router-0", "the latest hash written once the pod exists", map[string]string{
		wellknown.AppliedHashAnnotation: "hash-2",
	})
}

// TestNoConflictWithOtherWriters pins why the reporter sends a merge patch
// without a resource version: another writer's update between two reports
// neither fails the report nor is undone by it.
func TestNoConflictWithOtherWriters(t *testing.T) {
	env := testenv.Get(t)
	ns := testenv.NewNamespace(t, env.Client, "podreport")
	createPod(t, env, ns, "router-0", nil)
	r := run(t, env, ns, "router-0")
	r.Report("hash-1")
	waitAnnotations(t, env, ns, "router-0", "the first hash", map[string]string{wellknown.AppliedHashAnnotation: "hash-1"})

	// Another writer changes the pod: the reporter's view of it (it has
	// none; it never reads) is now stale.
	patch := []byte(`{"metadata":{"annotations":{"example.com/other":"x"},"labels":{"example.com/l":"y"}}}`)
	if _, err := env.Kube.CoreV1().Pods(ns).Patch(context.Background(), "router-0", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	r.Report("hash-2")
	pod := waitAnnotations(t, env, ns, "router-0", "the second hash beside the other writer's annotation", map[string]string{
		wellknown.AppliedHashAnnotation: "hash-2", "example.com/other": "x",
	})
	if pod.Labels["example.com/l"] != "y" {
		t.Errorf("the other writer's label is gone: %v", pod.Labels)
	}
}

// TestFormatEjected pins the ejected-policies value: role/policy=reason
// in the caller's order, at most wellknown.MaxEjectedPoliciesReported of
// them and a count of the rest.
func TestFormatEjected(t *testing.T) {
	if got := podreport.FormatEjected(nil); got != "" {
		t.Errorf("FormatEjected(nil) = %q, want empty", got)
	}
	var list []podreport.Ejected
	var want []string
	for i := range wellknown.MaxEjectedPoliciesReported + 3 {
		list = append(list, podreport.Ejected{Role: "decode", Policy: fmt.Sprintf("p%02d", i), Reason: "Panicked"})
		if i < wellknown.MaxEjectedPoliciesReported {
			want = append(want, fmt.Sprintf("decode/p%02d=Panicked", i))
		}
	}
	if got, want := podreport.FormatEjected(list[:2]), "decode/p00=Panicked,decode/p01=Panicked"; got != want {
		t.Errorf("two policies: %q, want %q", got, want)
	}
	if got, want := podreport.FormatEjected(list[:wellknown.MaxEjectedPoliciesReported]), strings.Join(want, ","); got != want {
		t.Errorf("exactly the most reported: %q, want %q", got, want)
	}
	if got, want := podreport.FormatEjected(list), strings.Join(want, ",")+",+3"; got != want {
		t.Errorf("three over the most reported: %q, want %q", got, want)
	}
}

// TestFormatConfigStatusFits pins that the config status fits the bytes
// the manager reads however long its errors are, cut on a rune boundary
// and marked as cut, while short errors pass whole.
func TestFormatConfigStatusFits(t *testing.T) {
	long := strings.Repeat("é", 5000) // two bytes a rune: a cut may land mid-rune
	cs := rolloutapi.ConfigStatus{Assigned: strings.Repeat("a", 64), Active: strings.Repeat("b", 64), LastKnownGood: strings.Repeat("c", 64), Error: long,
		Candidate: &rolloutapi.CandidateStatus{Assigned: strings.Repeat("d", 64), Active: strings.Repeat("e", 64), Stage: rolloutapi.StageShadow, Weight: 10, Error: "x" + long}}
	got := podreport.FormatConfigStatus(cs)
	if len(got) > rolloutapi.MaxConfigStatusBytes {
		t.Errorf("config status is %d bytes, over the %d the manager reads", len(got), rolloutapi.MaxConfigStatusBytes)
	}
	var back rolloutapi.ConfigStatus
	if err := json.Unmarshal([]byte(got), &back); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	for name, e := range map[string]string{"error": back.Error, "candidate's error": back.Candidate.Error} {
		if !strings.HasSuffix(e, "…") || strings.ContainsRune(e, '\uFFFD') || len(e) < 1000 {
			t.Errorf("%s cut to %d bytes, want most of it kept, whole runes, ending in …", name, len(e))
		}
	}
	if back.Assigned != cs.Assigned || back.Candidate.Weight != 10 {
		t.Errorf("fields other than errors changed: %+v", back)
	}
	if cs.Error != long {
		t.Errorf("FormatConfigStatus changed its argument's error")
	}

	short := rolloutapi.ConfigStatus{Active: "h", Error: "role decode: no such policy"}
	if got, want := podreport.FormatConfigStatus(short), `{"active":"h","error":"role decode: no such policy"}`; got != want {
		t.Errorf("short status: %s, want %s", got, want)
	}
}
