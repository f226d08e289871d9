package observability_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/tools/observability"
)

// unknownMetrics returns the metrics expr reads that are not in known.
func unknownMetrics(t *testing.T, known map[string]string, expr string) []string {
	t.Helper()
	names, err := observability.MetricNames(expr)
	if err != nil {
		t.Fatalf("%q: %v", expr, err)
	}
	var out []string
	for _, n := range names {
		if _, ok := known[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// TestDashboardQueriesReadKnownMetrics: every panel's query and every
// variable's selector parses with Prometheus's PromQL parser and reads
// only metrics the sidecar or the manager exports.
func TestDashboardQueriesReadKnownMetrics(t *testing.T) {
	k := knownMetrics(t)
	d, err := observability.Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := observability.Queries(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("only %d queries found in the dashboard: %v", len(qs), qs)
	}
	for where, expr := range qs {
		if _, err := observability.MetricNames(expr); err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			continue
		}
		if u := unknownMetrics(t, k, expr); len(u) > 0 {
			t.Errorf("%s reads %v, which neither the sidecar nor the manager exports", where, u)
		}
	}
}

// TestUnknownMetricIsCaught: the check above fails on a metric the
// product does not export (a renamed one), and on a selector that names
// no metric.
func TestUnknownMetricIsCaught(t *testing.T) {
	k := knownMetrics(t)
	expr := `sum(rate(kvhint_router_bookings_total[5m])) / sum(rate(kvhint_router_booking_total[5m]))`
	if diff := cmp.Diff([]string{"kvhint_router_booking_total"}, unknownMetrics(t, k, expr)); diff != "" {
		t.Errorf("unknown metrics of %q (-want +got):\n%s", expr, diff)
	}
	if _, err := observability.MetricNames(`rate({job="kvhint-sidecar"}[5m])`); err == nil {
		t.Error("a selector without a metric name passed")
	}
}

// TestDashboardConfigMap: the committed ConfigMap carries the label
// Grafana's dashboard sidecar selects, and the dashboard's JSON with its
// uid and panels.
func TestDashboardConfigMap(t *testing.T) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(readRoot(t, observability.DashboardConfigMapPath), &cm); err != nil {
		t.Fatalf("%s: %v", observability.DashboardConfigMapPath, err)
	}
	if got := cm.Labels["grafana_dashboard"]; got != "1" {
		t.Errorf("label grafana_dashboard %q; want \"1\"", got)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("data keys %d; want one dashboard", len(cm.Data))
	}
	for key, data := range cm.Data {
		var d struct {
			UID    string            `json:"uid"`
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatalf("data %s: %v", key, err)
		}
		if d.UID != observability.DashboardUID || len(d.Panels) < 20 {
			t.Errorf("data %s: uid %q with %d panels; want %q with 20 or more", key, d.UID, len(d.Panels), observability.DashboardUID)
		}
	}
}
