package managermetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// fakeClient is a fake client over objs (DynamoGraphDeployments
// included), for the collector's narrow unit tests that need no API
// server; the manager's own collector is tested against one in
// controllers.
func fakeClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	s.AddKnownTypeWithName(dynamograph.GVK, &unstructured.Unstructured{})
	s.AddKnownTypeWithName(dynamograph.GroupVersion.WithKind(dynamograph.Kind+"List"), &unstructured.UnstructuredList{})
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// routerPodsHeader is the exposition header of kvhint_manager_router_pods.
const routerPodsHeader = "# HELP kvhint_manager_router_pods A router's pods as its RouterRoles' status counts them: state total (not being deleted) and up_to_date (running the compiled config's hash); mode sidecar (a kvhint sidecar in each pod reports the hash) or restart (a Deployment or DynamoGraphDeployment opted in to restarts by the manager).\n" +
	"# TYPE kvhint_manager_router_pods gauge\n"

func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// roles returns a RouterRole of each router in namespace team, whose
// status counts total pods, two of them up to date.
func roles(total int32, routers ...string) []client.Object {
	var out []client.Object
	for _, router := range routers {
		rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: router + "-decode"},
			Spec: v1alpha1.RouterRoleSpec{Router: router, Role: "decode"}}
		rr.Status.RouterPods = &v1alpha1.RouterPods{Hash: router + "-hash", Total: total, UpToDate: 2}
		out = append(out, rr)
	}
	return out
}

// TestStatusMetricsOnlyOnLeader: a replica that is not the leader exports
// no status series, so that each alert fires once, not once per replica.
func TestStatusMetricsOnlyOnLeader(t *testing.T) {
	rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "decode"},
		Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: "decode"}}
	rr.Status.Conditions = []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed"}}
	elected := make(chan struct{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(Sources{Reader: fakeClient(t, rr), Elected: elected}))

	before := `
# HELP kvhint_manager_routerroles RouterRoles in the manager's cache. A manager that is not the leader reports 0 and no status series: the leader reports them.
# TYPE kvhint_manager_routerroles gauge
kvhint_manager_routerroles 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(before), "kvhint_manager_routerroles", "kvhint_manager_routerrole_condition"); err != nil {
		t.Errorf("before election: %v", err)
	}
	close(elected)
	after := `
# HELP kvhint_manager_routerrole_condition 1 when the RouterRole's condition of this type is True, 0 when it is False or Unknown; absent while the role does not carry the condition (Stalled, Reconciling and PolicyEjected are present only when True).
# TYPE kvhint_manager_routerrole_condition gauge
kvhint_manager_routerrole_condition{namespace="team",role="decode",router="llama",routerrole="decode",type="Programmed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(after), "kvhint_manager_routerrole_condition"); err != nil {
		t.Errorf("once elected: %v", err)
	}
}

// TestRouterPodsMode: a router one of whose Deployments opted in to
// restarts (the policy-volume annotation) counts its pods under mode
// restart, where no sidecar runs; the others under mode sidecar.
func TestRouterPodsMode(t *testing.T) {
	restart := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "dynamo-frontend",
		Labels:      map[string]string{v1alpha1.RouterLabel: "dynamo"},
		Annotations: map[string]string{v1alpha1.PolicyVolumeAnnotation: "policy"}}}
	plain := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "llama-router",
		Labels: map[string]string{v1alpha1.RouterLabel: "llama"}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(Sources{Reader: fakeClient(t, append(roles(3, "dynamo", "llama"), restart, plain)...), Elected: closed()}))

	want := `
# HELP kvhint_manager_router_config_info 1 for the hash of the config compiled for a router (its <router>-hints ConfigMap's), to compare with the hash each sidecar runs (kvhint_router_config_info).
# TYPE kvhint_manager_router_config_info gauge
kvhint_manager_router_config_info{hash="dynamo-hash",namespace="team",router="dynamo"} 1
kvhint_manager_router_config_info{hash="llama-hash",namespace="team",router="llama"} 1
` + routerPodsHeader + `kvhint_manager_router_pods{mode="restart",namespace="team",router="dynamo",state="total"} 3
kvhint_manager_router_pods{mode="restart",namespace="team",router="dynamo",state="up_to_date"} 2
kvhint_manager_router_pods{mode="sidecar",namespace="team",router="llama",state="total"} 3
kvhint_manager_router_pods{mode="sidecar",namespace="team",router="llama",state="up_to_date"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvhint_manager_router_pods", "kvhint_manager_router_config_info"); err != nil {
		t.Error(err)
	}
}

// TestRouterPodsModeGraph: a router whose DynamoGraphDeployment opted in
// counts its pods under mode restart (no sidecar runs there, and
// KVHintSidecarMissing must not fire for it); a DGD without the opt-in
// leaves its router under mode sidecar.
func TestRouterPodsModeGraph(t *testing.T) {
	objs := roles(2, "dynamo", "llama")
	for _, router := range []string{"dynamo", "llama"} {
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
	c := fakeClient(t, objs...)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(Sources{Reader: c, Elected: closed(), Graphs: func() client.Reader { return c }}))
	want := `
` + routerPodsHeader + `kvhint_manager_router_pods{mode="restart",namespace="team",router="dynamo",state="total"} 2
kvhint_manager_router_pods{mode="restart",namespace="team",router="dynamo",state="up_to_date"} 2
kvhint_manager_router_pods{mode="sidecar",namespace="team",router="llama",state="total"} 2
kvhint_manager_router_pods{mode="sidecar",namespace="team",router="llama",state="up_to_date"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvhint_manager_router_pods"); err != nil {
		t.Error(err)
	}
}
