package testenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(time.Second, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("check's context has no deadline")
		}
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll: %v after %d calls; want nil after 3", err, calls)
	}

	start := time.Now()
	err = Poll(150*time.Millisecond, func(context.Context) error { return errors.New("never") })
	if err == nil || err.Error() != "never" {
		t.Fatalf("Poll of a check that never holds: %v; want its last error", err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 2*time.Second {
		t.Fatalf("Poll gave up after %s; want about 150ms", took)
	}
}

func TestAssets(t *testing.T) {
	t.Setenv(AssetsVar, "")
	dir, skip, err := Assets()
	if dir != "" || err != nil || !strings.Contains(skip, "hack/envtest-assets.sh") || !strings.Contains(skip, AssetsVar) {
		t.Fatalf("unset: %q %q %v; want a skip naming %s and how to get the binaries", dir, skip, err, AssetsVar)
	}

	empty := t.TempDir()
	t.Setenv(AssetsVar, empty)
	dir, skip, err = Assets()
	if dir != "" || skip != "" || err == nil || !strings.Contains(err.Error(), empty) ||
		!strings.Contains(err.Error(), "kube-apiserver") || !strings.Contains(err.Error(), "hack/envtest-assets.sh") {
		t.Fatalf("folder without binaries: %q %q %v; want an error naming the folder, the binary and how to get it", dir, skip, err)
	}

	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(empty, bin), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if dir, skip, err = Assets(); dir != empty || skip != "" || err != nil {
		t.Fatalf("folder with both binaries: %q %q %v", dir, skip, err)
	}
}

func TestCondition(t *testing.T) {
	rr := RouterRole("ns", "decode", "llama", v1alpha1.RoleDecode, Hint("kv-retain", map[string]any{"ttl_seconds": 60}))
	if _, err := Condition(rr, string(v1alpha1.ConditionAccepted)); err == nil {
		t.Fatal("a role without conditions has an Accepted condition")
	}
	rr.Status.Conditions = []metav1.Condition{
		{Type: string(v1alpha1.ConditionProgrammed), Status: metav1.ConditionFalse, Reason: "Pending"},
		{Type: string(v1alpha1.ConditionAccepted), Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 4, Message: "ok"},
	}
	c, err := Condition(rr, string(v1alpha1.ConditionAccepted))
	if err != nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != 4 || c.Message != "ok" {
		t.Fatalf("Accepted: %+v, %v", c, err)
	}
	hp := HintPolicy("ns", "p", "kv-retain", nil)
	hp.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.ConditionAccepted), Status: metav1.ConditionFalse, Reason: "UnknownHintType"}}
	if c, err := Condition(hp, string(v1alpha1.ConditionAccepted)); err != nil || c.Reason != "UnknownHintType" {
		t.Fatalf("HintPolicy Accepted: %+v, %v", c, err)
	}
}

func TestBuilders(t *testing.T) {
	rr := RouterRole("ns", "decode", "llama", v1alpha1.RoleDecode, Hint("kv-retain", map[string]any{"ttl_seconds": 60}))
	if got := string(rr.Spec.Hints[0].Parameters.Raw); got != `{"ttl_seconds":60}` {
		t.Errorf("hint parameters %s", got)
	}
	if Hint("kv-fetch", nil).Parameters != nil {
		t.Error("a hint without parameters has some")
	}
	d := RouterDeployment("ns", "llama", 3)
	if d.Name != "llama-frontend" || *d.Spec.Replicas != 3 || d.Labels[v1alpha1.RouterLabel] != "llama" ||
		d.Annotations[v1alpha1.RouterContainerAnnotation] != d.Spec.Template.Spec.Containers[0].Name ||
		strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ") != "--router-mode kv" {
		t.Errorf("router deployment %+v", d)
	}
	if p := RouterPod("ns", "r-0", "llama"); p.Labels[v1alpha1.RouterLabel] != "llama" || len(p.Spec.Containers) != 1 {
		t.Errorf("router pod %+v", p)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "config", "crd")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
}

func TestWantCheck(t *testing.T) {
	cond := &metav1.Condition{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed", Message: "3/3 router pods run it", ObservedGeneration: 2}
	for _, tc := range []struct {
		name string
		want Want
		gen  int64
		ok   bool
	}{
		{"status at the current generation", Want{Status: metav1.ConditionTrue}, 2, true},
		{"an older generation", Want{Status: metav1.ConditionTrue}, 3, false},
		{"any generation", Want{Status: metav1.ConditionTrue, Generation: AnyGeneration}, 3, true},
		{"a named generation", Want{Status: metav1.ConditionTrue, Generation: 2}, 3, true},
		{"another named generation", Want{Status: metav1.ConditionTrue, Generation: 1}, 2, false},
		{"other status", Want{Status: metav1.ConditionFalse}, 2, false},
		{"reason", Want{Status: metav1.ConditionTrue, Reason: "Programmed"}, 2, true},
		{"other reason", Want{Status: metav1.ConditionTrue, Reason: "Pending"}, 2, false},
		{"message", Want{Status: metav1.ConditionTrue, MessageContains: "3/3"}, 2, true},
		{"other message", Want{Status: metav1.ConditionTrue, MessageContains: "2/3"}, 2, false},
	} {
		if err := tc.want.check(cond, tc.gen); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestBuildNamesWhatFailed(t *testing.T) {
	_, err := Build(t.TempDir(), "no-such-command")
	if err == nil || !strings.Contains(err.Error(), "building no-such-command") {
		t.Fatalf("building a command the module lacks: %v; want an error naming it", err)
	}
}

// TestBuildShared: two suites that ask for kvhint at once with a shared
// folder get one link of it between them (the same file, hard linked into
// each one's folder), and it runs; a command the module lacks still fails
// naming it.
func TestBuildShared(t *testing.T) {
	if testing.Short() {
		t.Skip("links kvhint")
	}
	shared := t.TempDir()
	t.Setenv(BinariesVar, shared)
	dirs := []string{t.TempDir(), t.TempDir()}
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, d := range dirs {
		wg.Go(func() { _, errs[i] = Build(d, "kvhint") })
	}
	wg.Wait()
	want, err := os.Stat(filepath.Join(shared, "kvhint"))
	if err != nil {
		t.Fatalf("the shared folder has no kvhint: %v (builds: %v)", err, errs)
	}
	for i, d := range dirs {
		if errs[i] != nil {
			t.Fatalf("Build into %s: %v", d, errs[i])
		}
		got, err := os.Stat(filepath.Join(d, "kvhint"))
		if err != nil || !os.SameFile(got, want) {
			t.Errorf("%s/kvhint is not the shared folder's file (a second link, or a copy): %v", d, err)
		}
	}
	if out, err := exec.Command(filepath.Join(dirs[1], "kvhint"), "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "kvhint ") {
		t.Errorf("the shared kvhint version: %v\n%s", err, out)
	}
	if _, err := Build(t.TempDir(), "no-such-command"); err == nil || !strings.Contains(err.Error(), "building no-such-command") {
		t.Errorf("building a command the module lacks into the shared folder: %v; want an error naming it", err)
	}
}

// TestContainerEnv: the downward API's fields and the memory limit are
// resolved as the kubelet resolves them; a source it does not resolve is
// an error naming the variable.
func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	c := &corev1.Container{
		Env: []corev1.EnvVar{
			{Name: "A", Value: "x"},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
		},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
	}
	env, err := ContainerEnv(pod, c, "127.0.0.2")
	if want := []string{"A=x", "POD_NAME=p", "POD_NAMESPACE=ns", "POD_IP=127.0.0.2", "MEM=268435456"}; err != nil || !slices.Equal(env, want) {
		t.Errorf("ContainerEnv = %q, %v; want %q", env, err, want)
	}
	c.Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	if _, err := ContainerEnv(pod, c, ""); err == nil || !strings.Contains(err.Error(), "env NODE: field spec.nodeName not resolved here") {
		t.Errorf("an unresolved field: %v", err)
	}
}
