package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
)

// series gathers g and returns each series of the families named
// kvhint_manager_* whose namespace label is ns (or that have no namespace
// label, when ns is empty), as "name{label=value,...} value".
func series(t *testing.T, g prometheus.Gatherer, ns string) []string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	var out []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), controllers.ManagerMetricsNamespace+"_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			inNS := ns == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" {
					inNS = l.GetValue() == ns
					continue
				}
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if inNS {
				out = append(out, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
			}
		}
	}
	sort.Strings(out)
	return out
}

// fakeClient is a fake client over objs, for the collector's narrow unit
// tests that need no API server.
func fakeClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestStatusMetrics: the manager exports what its RouterRoles' status
// says, read from the API at scrape time: one series per condition, the
// router's pod counts, and nothing of a role once it is gone.
func TestStatusMetrics(t *testing.T) {
	ns := newNamespace(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(controllers.NewStatusCollector(k8s, closed()))

	rr := newRole(ns, "decode", "metrics", "decode", "dynamo-default-cost-fn")
	create(t, rr)
	cm := waitConfigMap(t, ns, "metrics", anyConfigMap)
	hash := cm.Annotations[v1alpha1.HashAnnotation]
	routerPod(t, ns, "metrics", "metrics-router-0", hash)
	routerPod(t, ns, "metrics", "metrics-router-1", "")
	waitConditionMessage(t, rr, v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending, "1/2 router pods run "+hash)

	role := "role=decode,router=metrics,routerrole=decode"
	want := []string{
		"kvhint_manager_router_config_info{hash=" + hash + ",router=metrics} 1",
		"kvhint_manager_router_pods{mode=sidecar,router=metrics,state=total} 2",
		"kvhint_manager_router_pods{mode=sidecar,router=metrics,state=up_to_date} 1",
		"kvhint_manager_routerrole_condition{" + role + ",type=Accepted} 1",
		"kvhint_manager_routerrole_condition{" + role + ",type=Programmed} 0",
		"kvhint_manager_routerrole_condition{" + role + ",type=Ready} 0",
		"kvhint_manager_routerrole_condition{" + role + ",type=Reconciling} 1",
		"kvhint_manager_routerrole_condition{" + role + ",type=ResolvedRefs} 1",
	}
	if diff := cmp.Diff(want, series(t, reg, ns)); diff != "" {
		t.Errorf("series of namespace %s (-want +got):\n%s", ns, diff)
	}

	// The role goes: so do its series, with no stale value left behind.
	if err := k8s.Delete(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no series for the deleted role", func(context.Context) error {
		if got := series(t, reg, ns); len(got) != 0 {
			return fmt.Errorf("still exported: %v", got)
		}
		return nil
	})
}

// TestStatusMetricsOnlyOnLeader: a replica that is not the leader exports
// no status series, so that each alert fires once, not once per replica.
func TestStatusMetricsOnlyOnLeader(t *testing.T) {
	rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "decode"},
		Spec: v1alpha1.RouterRoleSpec{Router: "llama", Role: "decode"}}
	rr.Status.Conditions = []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed"}}
	c := fakeClient(t, rr)
	elected := make(chan struct{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(controllers.NewStatusCollector(c, elected))

	if diff := cmp.Diff([]string{"kvhint_manager_routerroles{} 0"}, series(t, reg, "")); diff != "" {
		t.Errorf("before election (-want +got):\n%s", diff)
	}
	close(elected)
	want := []string{"kvhint_manager_routerrole_condition{role=decode,router=llama,routerrole=decode,type=Programmed} 1"}
	if diff := cmp.Diff(want, series(t, reg, "team")); diff != "" {
		t.Errorf("once elected (-want +got):\n%s", diff)
	}
}

// TestRouterPodsMode: a router one of whose Deployments opted in to
// restarts (the policy-volume annotation) counts its pods under mode
// restart, where no sidecar runs; the others under mode sidecar.
func TestRouterPodsMode(t *testing.T) {
	var objs []v1alpha1.RouterRole
	for _, router := range []string{"dynamo", "llama"} {
		rr := v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: router + "-decode"},
			Spec: v1alpha1.RouterRoleSpec{Router: router, Role: "decode"}}
		rr.Status.RouterPods = &v1alpha1.RouterPods{Hash: router + "-hash", Total: 3, UpToDate: 2}
		objs = append(objs, rr)
	}
	restart := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "dynamo-frontend",
		Labels:      map[string]string{v1alpha1.RouterLabel: "dynamo"},
		Annotations: map[string]string{v1alpha1.PolicyVolumeAnnotation: "policy"}}}
	plain := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "llama-router",
		Labels: map[string]string{v1alpha1.RouterLabel: "llama"}}}
	c := fakeClient(t, &objs[0], &objs[1], restart, plain)
	reg := prometheus.NewRegistry()
	reg.MustRegister(controllers.NewStatusCollector(c, closed()))

	want := []string{
		"kvhint_manager_router_config_info{hash=dynamo-hash,router=dynamo} 1",
		"kvhint_manager_router_config_info{hash=llama-hash,router=llama} 1",
		"kvhint_manager_router_pods{mode=restart,router=dynamo,state=total} 3",
		"kvhint_manager_router_pods{mode=restart,router=dynamo,state=up_to_date} 2",
		"kvhint_manager_router_pods{mode=sidecar,router=llama,state=total} 3",
		"kvhint_manager_router_pods{mode=sidecar,router=llama,state=up_to_date} 2",
	}
	if diff := cmp.Diff(want, series(t, reg, "team")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
