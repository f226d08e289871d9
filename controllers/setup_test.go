package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/managermetrics"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
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

func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestStatusMetrics: the manager exports what its RouterRoles' status
// says, read from the API at scrape time: one series per condition, the
// router's pod counts, and nothing of a role once it is gone.
func TestStatusMetrics(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	reg := prometheus.NewRegistry()
	reg.MustRegister(managermetrics.NewCollector(managermetrics.Sources{Reader: k8s, Elected: closed()}))

	rr := newRole(ns, "decode", "metrics", "decode", "dynamo-default-cost-fn")
	testenv.Create(t, k8s, rr)
	cm := testenv.WaitConfigMap(t, k8s, timeout, ns, "metrics", nil)
	hash := cm.Annotations[v1alpha1.HashAnnotation]
	testenv.CreateRouterPod(t, k8s, ns, "metrics", "metrics-router-0", hash)
	testenv.CreateRouterPod(t, k8s, ns, "metrics", "metrics-router-1", "")
	testenv.WaitCondition(t, k8s, timeout, rr, string(v1alpha1.ConditionProgrammed), testenv.Want{Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonPending), MessageContains: "1/2 router pods run " + hash, Generation: testenv.AnyGeneration})

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
	testenv.Eventually(t, timeout, "no series for the deleted role", func(context.Context) error {
		if got := series(t, reg, ns); len(got) != 0 {
			return fmt.Errorf("still exported: %v", got)
		}
		return nil
	})
}
