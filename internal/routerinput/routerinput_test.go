package routerinput

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestRead: a router's input is its own RouterRoles, each HintPolicy they
// reference once (a missing one left to the compile step), its pods, and
// its compiled ConfigMap, read around the cache when the cache has none.
func TestRead(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	role := func(name, router string, policies ...string) *v1alpha1.RouterRole {
		rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		rr.Spec.Router = router
		for _, p := range policies {
			rr.Spec.Hints = append(rr.Spec.Hints, v1alpha1.HintItem{PolicyRef: &v1alpha1.HintPolicyReference{Name: p}})
		}
		return rr
	}
	pod := func(name, router string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{v1alpha1.RouterLabel: router}}}
	}
	cache := fake.NewClientBuilder().WithScheme(s).
		WithIndex(&v1alpha1.RouterRole{}, RouterIndex, func(o client.Object) []string {
			return []string{o.(*v1alpha1.RouterRole).Spec.Router}
		}).
		WithObjects(role("a", "llama", "p", "gone"), role("b", "llama", "p"), role("c", "other", "q"),
			&v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}},
			&v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns"}},
			pod("llama-0", "llama"), pod("other-0", "other")).
		Build()
	edited := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HintsConfigMapName("llama"), Namespace: "ns"}, Data: map[string]string{"k": "v"}}
	api := fake.NewClientBuilder().WithScheme(s).WithObjects(edited).Build()

	in, cm, err := Reader{Client: cache, APIReader: api}.Read(context.Background(), "ns", "llama")
	if err != nil {
		t.Fatal(err)
	}
	names := func(objs []client.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.GetName())
		}
		slices.Sort(out)
		return out
	}
	var roles, policies, pods []client.Object
	for i := range in.RouterRoles {
		roles = append(roles, &in.RouterRoles[i])
	}
	for i := range in.HintPolicies {
		policies = append(policies, &in.HintPolicies[i])
	}
	for i := range in.Pods {
		pods = append(pods, &in.Pods[i])
	}
	for what, d := range map[string]string{
		"roles":    cmp.Diff([]string{"a", "b"}, names(roles)),
		"policies": cmp.Diff([]string{"p"}, names(policies)),
		"pods":     cmp.Diff([]string{"llama-0"}, names(pods)),
	} {
		if d != "" {
			t.Errorf("%s (-want +got):\n%s", what, d)
		}
	}
	if cm == nil || cm.Data["k"] != "v" || len(in.ConfigMaps) != 1 {
		t.Errorf("ConfigMap %v, input's %d; want the one read around the cache", cm, len(in.ConfigMaps))
	}

	// Without a reader around the cache, a ConfigMap the cache lacks is none.
	if _, cm, err := (Reader{Client: cache}).Read(context.Background(), "ns", "llama"); err != nil || cm != nil {
		t.Errorf("without APIReader: %v, %v; want no ConfigMap", cm, err)
	}
}

// TestPolicyRefs: the names a role references, sorted, each once.
func TestPolicyRefs(t *testing.T) {
	rr := &v1alpha1.RouterRole{}
	for _, p := range []string{"b", "a", "b"} {
		rr.Spec.Hints = append(rr.Spec.Hints, v1alpha1.HintItem{PolicyRef: &v1alpha1.HintPolicyReference{Name: p}})
	}
	rr.Spec.Hints = append(rr.Spec.Hints, v1alpha1.HintItem{})
	if diff := cmp.Diff([]string{"a", "b"}, PolicyRefs(rr)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
