package dispatchmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// TestIsolationSeries: each isolation series the dispatcher asks for is
// the documented metric with the policy's labels and the reason label
// values the alerts read; forgetting the policy deletes them, and another
// policy's stay.
func TestIsolationSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	s := m.Isolation("decode", "slow", "vendor-slow")
	s.Ejections(dispatch.EjectOverrun).Inc()
	s.Ejections(dispatch.EjectAbandoned).Inc()
	s.Ejections(dispatch.EjectBusy).Inc()
	s.Ejected().Set(1)
	s.Probation().Set(0)
	s.SkippedEjected().Inc()
	s.SkippedBusy().Add(2)
	s.AbandonedRuns().Inc()
	s.AbandonedRunSeconds().Observe(0.5)
	p := m.Policy("decode", "slow", "vendor-slow")
	p.Overruns().Inc()
	p.OverrunSeconds().Add(0.25)
	m.Isolation("decode", "other", "vendor-slow").Ejected().Set(0)

	want := `
# HELP kvhint_router_policy_ejections_total Ejections of a policy from its role's path, by role, policy, policy type and reason (overrun, abandoned, busy).
# TYPE kvhint_router_policy_ejections_total counter
kvhint_router_policy_ejections_total{policy="slow",policy_type="vendor-slow",reason="abandoned",role="decode"} 1
kvhint_router_policy_ejections_total{policy="slow",policy_type="vendor-slow",reason="busy",role="decode"} 1
kvhint_router_policy_ejections_total{policy="slow",policy_type="vendor-slow",reason="overrun",role="decode"} 1
# HELP kvhint_router_policy_ejected 1 while a policy is ejected from its role's path (bookings skip it), by role, policy and policy type.
# TYPE kvhint_router_policy_ejected gauge
kvhint_router_policy_ejected{policy="other",policy_type="vendor-slow",role="decode"} 0
kvhint_router_policy_ejected{policy="slow",policy_type="vendor-slow",role="decode"} 1
# HELP kvhint_router_policy_runs_skipped_total Bookings that did not run a policy, by role, policy, policy type and reason (ejected; busy: the policy had its most runs in flight).
# TYPE kvhint_router_policy_runs_skipped_total counter
kvhint_router_policy_runs_skipped_total{policy="slow",policy_type="vendor-slow",reason="busy",role="decode"} 2
kvhint_router_policy_runs_skipped_total{policy="slow",policy_type="vendor-slow",reason="ejected",role="decode"} 1
# HELP kvhint_router_policy_abandoned_runs Runs of a policy abandoned at the hard deadline that have not returned yet (goroutines held), by role, policy and policy type.
# TYPE kvhint_router_policy_abandoned_runs gauge
kvhint_router_policy_abandoned_runs{policy="slow",policy_type="vendor-slow",role="decode"} 1
# HELP kvhint_router_policy_overrun_seconds_total Time the runs of policy_overruns_total took, in all, by role, policy and policy type.
# TYPE kvhint_router_policy_overrun_seconds_total counter
kvhint_router_policy_overrun_seconds_total{policy="slow",policy_type="vendor-slow",role="decode"} 0.25
`
	names := []string{"kvhint_router_policy_ejections_total", "kvhint_router_policy_ejected", "kvhint_router_policy_runs_skipped_total",
		"kvhint_router_policy_abandoned_runs", "kvhint_router_policy_overrun_seconds_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.iso.abandonedReturn); n != 1 {
		t.Errorf("policy_abandoned_run_duration_seconds: %d series, want 1", n)
	}

	m.ForgetPolicy("decode", "slow", "vendor-slow")
	for _, c := range m.iso.collectors() {
		want := 0
		if c == m.iso.ejected {
			want = 1 // decode/other
		}
		if n := testutil.CollectAndCount(c); n != want {
			t.Errorf("%T after ForgetPolicy: %d series, want %d", c, n, want)
		}
	}
	m.ForgetRole("decode")
	if n := testutil.CollectAndCount(m.iso.ejected); n != 0 {
		t.Errorf("policy_ejected after ForgetRole: %d series, want 0", n)
	}
}
