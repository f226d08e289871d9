// Package admission tests the admission policies of config/admission, and
// the sidecar RBAC of config/router, against a real kube-apiserver, with
// real service account tokens bound to pods. It has a control plane of its
// own: the policies bind cluster-wide and would refuse the admin-run
// sidecars of the other suites.
package admission

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/podreport"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

var (
	restCfg    *rest.Config
	admin      kubernetes.Interface
	kubeconfig string
	repo       string
	suite      *testenv.Env
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{
		Name: "admission",
		// Pods are admitted as on a cluster: the ServiceAccount plugin on.
		// Each test creates the ServiceAccounts its pods use.
		AdmitAsClusters: true,
		Setup: func(env *testenv.Env) (func(), error) {
			suite = env
			restCfg, admin, kubeconfig, repo = env.Config, env.Kube, env.Kubeconfig, env.Repo
			return nil, nil
		},
	}))
}

func requireEnv(t *testing.T) {
	t.Helper()
	testenv.Get(t)
}

func pod(name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			ServiceAccountName:           "kvhint-sidecar-llama",
			AutomountServiceAccountToken: ptrTo(false),
			Containers:                   []corev1.Container{{Name: "main", Image: "router:1.0"}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// tokenFor mints a token of ServiceAccount sa, bound to pod when it is
// not nil, as the kubelet does for a projected token, and returns a
// client that uses it and nothing else.
func tokenFor(t *testing.T, ns, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(tokenConfig(t, ns, sa, pod))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokenConfig is a client config with only a token of ServiceAccount sa,
// bound to pod when not nil.
func tokenConfig(t *testing.T, ns, sa string, pod *corev1.Pod) *rest.Config {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(600))}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", sa, err)
	}
	cfg := rest.AnonymousClientConfig(restCfg)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

func patchPod(c kubernetes.Interface, ns, name, patch string, dryRun bool) error {
	opts := metav1.PatchOptions{FieldManager: v1alpha1.SidecarFieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := c.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), opts)
	return err
}

func annotation(key, value string) string {
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
}

const hash = "0123456789abcdef"

// TestSidecarWritesOnlyItsOwnReport is issue item 1's attack, as the
// sidecar's service account with a token bound to its pod (what the
// kubelet mounts): with config/router's RBAC alone it could change another
// pod's image and labels and forge another router's report. With
// config/admission it may write only the applied-hash annotation of its
// own pod; and nobody else may set that annotation at all.
func TestSidecarWritesOnlyItsOwnReport(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := "routers"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.MustCreateFile(t, suite.Client, ns, filepath.Join(repo, "config/router/rbac.yaml"))
	suite.Kubectl(t, "apply", "-k", filepath.Join(repo, "config/admission"))

	routerLabels := map[string]string{v1alpha1.RouterLabel: "llama"}
	var own, other, worker *corev1.Pod
	for _, p := range []**corev1.Pod{&own, &other, &worker} {
		name := map[**corev1.Pod]string{&own: "llama-router-0", &other: "llama-router-1", &worker: "llama-worker-0"}[p]
		labels := routerLabels
		if p == &worker {
			labels = map[string]string{"app.kubernetes.io/name": "llama"}
		}
		created, err := admin.CoreV1().Pods(ns).Create(ctx, pod(name, labels, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		*p = created
	}
	sidecar := tokenFor(t, ns, "kvhint-sidecar-llama", own)

	// The policies take effect a moment after they are created: probe
	// with dry runs, which go through admission and change nothing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := patchPod(sidecar, ns, worker.Name, `{"metadata":{"labels":{"probe":"x"}}}`, true)
		if err != nil && strings.Contains(err.Error(), "kvhint-sidecar-pod-report") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy does not refuse a sidecar relabelling a worker pod: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, tc := range []struct {
		name, pod, patch string
		allowed          bool
		policy           string // in the refusal's message
	}{
		{"own pod's applied-hash", own.Name, annotation(v1alpha1.AppliedHashAnnotation, hash), true, ""},
		{"own pod's applied-hash again, changed", own.Name, annotation(v1alpha1.AppliedHashAnnotation, "fedcba9876543210"), true, ""},
		// Both policies refuse this one; either may answer first.
		{"another router pod's applied-hash", other.Name, annotation(v1alpha1.AppliedHashAnnotation, hash), false, "ValidatingAdmissionPolicy 'kvhint-"},
		{"another pod's image", worker.Name, `{"spec":{"containers":[{"name":"main","image":"evil:1"}]}}`, false, "kvhint-sidecar-pod-report"},
		{"another pod's labels", worker.Name, `{"metadata":{"labels":{"app.kubernetes.io/name":"stolen"}}}`, false, "kvhint-sidecar-pod-report"},
		{"own pod's labels", own.Name, `{"metadata":{"labels":{"hints.kvrouter.io/router":"other"}}}`, false, "kvhint-sidecar-pod-report"},
		{"own pod's image", own.Name, `{"spec":{"containers":[{"name":"main","image":"evil:1"}]}}`, false, "kvhint-sidecar-pod-report"},
		{"own pod's other annotations", own.Name, annotation("example.com/x", "y"), false, "kvhint-sidecar-pod-report"},
		{"own pod's finalizers", own.Name, `{"metadata":{"finalizers":["example.com/block"]}}`, false, "kvhint-sidecar-pod-report"},
		{"own pod's applied-hash, not a hash", own.Name, annotation(v1alpha1.AppliedHashAnnotation, strings.Repeat("x", 1000)), false, "kvhint-sidecar-pod-report"},
		{"own pod's ejected-policies", own.Name, annotation(v1alpha1.EjectedPoliciesAnnotation, "decode/slow-audit=overrun,prefill/hang=abandoned"), true, ""},
		{"own pod's ejected-policies, with a count of more", own.Name, annotation(v1alpha1.EjectedPoliciesAnnotation, strings.Repeat("decode/p=busy,", 16)+"+3"), true, ""},
		{"own pod's ejected-policies removed", own.Name, `{"metadata":{"annotations":{"` + v1alpha1.EjectedPoliciesAnnotation + `":null}}}`, true, ""},
		{"own pod's ejected-policies, free text", own.Name, annotation(v1alpha1.EjectedPoliciesAnnotation, "all good, nothing ejected"), false, "kvhint-sidecar-pod-report"},
		{"own pod's ejected-policies, 17 entries", own.Name, annotation(v1alpha1.EjectedPoliciesAnnotation, strings.TrimSuffix(strings.Repeat("decode/p=busy,", 17), ",")), false, "kvhint-sidecar-pod-report"},
		{"own pod's config-status", own.Name, annotation(rolloutapi.ConfigStatusAnnotation, `{"assigned":"`+hash+`","active":"`+hash+`","candidate":{"assigned":"fedcba9876543210","error":"hint policy \"kv-offload\" is not known … to this build"}}`), true, ""},
		{"own pod's config-status, not JSON", own.Name, annotation(rolloutapi.ConfigStatusAnnotation, "all on the candidate"), false, "kvhint-sidecar-pod-report"},
		{"own pod's config-status, over 4 KiB", own.Name, annotation(rolloutapi.ConfigStatusAnnotation, `{"error":"`+strings.Repeat("x", 4096)+`"}`), false, "kvhint-sidecar-pod-report"},
		{"another router pod's config-status", other.Name, annotation(rolloutapi.ConfigStatusAnnotation, `{"active":"`+hash+`"}`), false, "ValidatingAdmissionPolicy 'kvhint-"},
	} {
		t.Run("sidecar patches "+tc.name, func(t *testing.T) {
			err := patchPod(sidecar, ns, tc.pod, tc.patch, false)
			switch {
			case tc.allowed && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.allowed && err == nil:
				t.Errorf("allowed")
			case !tc.allowed && !strings.Contains(err.Error(), tc.policy):
				t.Errorf("refused, but not by %s: %v", tc.policy, err)
			case !tc.allowed:
				t.Logf("refused: %v", err)
			}
		})
	}

	t.Run("the sidecar's own reporter, with the bound token", func(t *testing.T) {
		// The code path kvhint sidecar runs, not a hand-made patch.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r := podreport.New(sidecar, ns, own.Name)
		go r.Run(ctx, logr.Discard())
		const reported = "00000000000000aa"
		r.Report(reported)
		deadline := time.Now().Add(15 * time.Second)
		for {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, own.Name, metav1.GetOptions{})
			if err == nil && p.Annotations[v1alpha1.AppliedHashAnnotation] == reported {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the reporter's hash never arrived: %v %v", err, p.Annotations)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The ejected policies, then none: the annotation comes and goes.
		for _, want := range []string{"decode/slow-audit=overrun", ""} {
			var list []podreport.Ejected
			if want != "" {
				list = []podreport.Ejected{{Role: "decode", Policy: "slow-audit", Reason: "overrun"}}
			}
			r.ReportEjected(list)
			deadline := time.Now().Add(15 * time.Second)
			for {
				p, err := admin.CoreV1().Pods(ns).Get(ctx, own.Name, metav1.GetOptions{})
				if err == nil && p.Annotations[v1alpha1.EjectedPoliciesAnnotation] == want {
					if _, set := p.Annotations[v1alpha1.EjectedPoliciesAnnotation]; set == (want != "") {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("ejected policies %q never arrived: %v %v", want, err, p.Annotations)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	t.Run("sidecar reads what it needs", func(t *testing.T) {
		if _, err := sidecar.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=llama"}); err != nil {
			t.Errorf("listing worker pods: %v", err)
		}
		// The ConfigMap source lists and watches its one ConfigMap by name.
		if _, err := sidecar.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=llama-hints"}); err != nil {
			t.Errorf("listing llama-hints: %v", err)
		}
	})
	t.Run("sidecar deletes another pod", func(t *testing.T) {
		err := sidecar.CoreV1().Pods(ns).Delete(ctx, worker.Name, metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("delete: %v; want Forbidden", err)
		}
	})
	t.Run("sidecar creates a pod", func(t *testing.T) {
		_, err := sidecar.CoreV1().Pods(ns).Create(ctx, pod("intruder", nil, nil), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("create: %v; want Forbidden", err)
		}
	})
	t.Run("sidecar reads another ConfigMap", func(t *testing.T) {
		_, err := sidecar.CoreV1().ConfigMaps(ns).Get(ctx, "chat-hints", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("get: %v; want Forbidden", err)
		}
	})
	t.Run("token bound to no pod", func(t *testing.T) {
		unbound := tokenFor(t, ns, "kvhint-sidecar-llama", nil)
		err := patchPod(unbound, ns, own.Name, annotation(v1alpha1.AppliedHashAnnotation, hash), false)
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'kvhint-") {
			t.Errorf("patch with an unbound token: %v; want refused", err)
		}
	})

	// Anyone else, a cluster admin included, may not set the report.
	t.Run("admin forges another router's applied-hash", func(t *testing.T) {
		err := patchPod(admin, ns, other.Name, annotation(v1alpha1.AppliedHashAnnotation, hash), false)
		if err == nil || !strings.Contains(err.Error(), "kvhint-applied-hash-writers") {
			t.Errorf("patch: %v; want refused by kvhint-applied-hash-writers", err)
		}
	})
	t.Run("admin forges a router pod's ejected-policies", func(t *testing.T) {
		err := patchPod(admin, ns, other.Name, annotation(v1alpha1.EjectedPoliciesAnnotation, "decode/kv-fetch=overrun"), false)
		if err == nil || !strings.Contains(err.Error(), "kvhint-applied-hash-writers") {
			t.Errorf("patch: %v; want refused by kvhint-applied-hash-writers", err)
		}
	})
	t.Run("admin forges a router pod's config-status", func(t *testing.T) {
		// A forged status could tell a rollout that every pod runs the
		// candidate, or that none refused it.
		err := patchPod(admin, ns, other.Name, annotation(rolloutapi.ConfigStatusAnnotation, `{"assigned":"`+hash+`","active":"`+hash+`"}`), false)
		if err == nil || !strings.Contains(err.Error(), "kvhint-applied-hash-writers") {
			t.Errorf("patch: %v; want refused by kvhint-applied-hash-writers", err)
		}
	})
	t.Run("admin creates a pod that claims a report", func(t *testing.T) {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, pod("llama-router-2", routerLabels, map[string]string{v1alpha1.AppliedHashAnnotation: hash}), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "kvhint-applied-hash-writers") {
			t.Errorf("create: %v; want refused by kvhint-applied-hash-writers", err)
		}
	})
	t.Run("admin takes a report away", func(t *testing.T) {
		if err := patchPod(admin, ns, own.Name, `{"metadata":{"annotations":{"hints.kvrouter.io/applied-hash":null}}}`, false); err != nil {
			t.Errorf("removing the annotation: %v", err)
		}
	})
	t.Run("admin changes other things", func(t *testing.T) {
		if err := patchPod(admin, ns, other.Name, `{"metadata":{"labels":{"team":"serving"}}}`, false); err != nil {
			t.Errorf("labelling a router pod: %v", err)
		}
	})
}
