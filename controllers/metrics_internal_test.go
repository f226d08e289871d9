package controllers

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// TestRouterPodsModeGraph: a router whose DynamoGraphDeployment opted in
// counts its pods under mode restart (no sidecar runs there, and
// KVHintSidecarMissing must not fire for it); a DGD without the opt-in
// leaves its router under mode sidecar.
func TestRouterPodsModeGraph(t *testing.T) {
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	s.AddKnownTypeWithName(dynamograph.GVK, &unstructured.Unstructured{})
	s.AddKnownTypeWithName(dynamograph.GroupVersion.WithKind(dynamograph.Kind+"List"), &unstructured.UnstructuredList{})
	var objs []client.Object
	for _, router := range []string{"dynamo", "llama"} {
		rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: router + "-decode"},
			Spec: v1alpha1.RouterRoleSpec{Router: router, Role: "decode"}}
		rr.Status.RouterPods = &v1alpha1.RouterPods{Hash: router + "-hash", Total: 2, UpToDate: 2}
		objs = append(objs, rr)
		g := &unstructured.Unstructured{}
		g.SetGroupVersionKind(dynamograph.GVK)
		g.SetNamespace("team")
		g.SetName(router)
		g.SetLabels(map[string]string{v1alpha1.RouterLabel: router})
		if router == "dynamo" {
			g.SetAnnotations(map[string]string{v1alpha1.RouterComponentAnnotation: ""})
		}
		objs = append(objs, g)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	graphs := &graphWatch{}
	var rd client.Reader = c
	graphs.cache.Store(&rd)
	elected := make(chan struct{})
	close(elected)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&statusCollector{reader: c, elected: elected, graphs: graphs})
	want := `
# HELP kvhint_manager_router_pods A router's pods as its RouterRoles' status counts them: state total (not being deleted) and up_to_date (running the compiled config's hash); mode sidecar (a kvhint sidecar in each pod reports the hash) or restart (a Deployment or DynamoGraphDeployment opted in to restarts by the manager).
# TYPE kvhint_manager_router_pods gauge
kvhint_manager_router_pods{mode="restart",namespace="team",router="dynamo",state="total"} 2
kvhint_manager_router_pods{mode="restart",namespace="team",router="dynamo",state="up_to_date"} 2
kvhint_manager_router_pods{mode="sidecar",namespace="team",router="llama",state="total"} 2
kvhint_manager_router_pods{mode="sidecar",namespace="team",router="llama",state="up_to_date"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvhint_manager_router_pods"); err != nil {
		t.Error(err)
	}
}
