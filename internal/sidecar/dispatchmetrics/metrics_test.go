package dispatchmetrics

import (
	"bufio"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// series is one metric as the reference documents it.
type series struct {
	Type, Labels, Help string
}

// dispatcherSeries are the metrics this package exports, every one of
// them: a metric added or removed is a change to the documented product.
var dispatcherSeries = []string{
	"kvhint_router_actions_dropped_total",
	"kvhint_router_actions_total",
	"kvhint_router_booking_errors_total",
	"kvhint_router_bookings_total",
	"kvhint_router_config_info",
	"kvhint_router_config_last_reload_failure_timestamp_seconds",
	"kvhint_router_config_last_reload_success_timestamp_seconds",
	"kvhint_router_config_last_reload_successful",
	"kvhint_router_config_reloads_total",
	"kvhint_router_hint_build_duration_seconds",
	"kvhint_router_kv_copies_dropped_total",
	"kvhint_router_policy_abandoned_run_duration_seconds",
	"kvhint_router_policy_abandoned_runs",
	"kvhint_router_policy_ejected",
	"kvhint_router_policy_ejections_total",
	"kvhint_router_policy_failures_total",
	"kvhint_router_policy_overrun_seconds_total",
	"kvhint_router_policy_overruns_total",
	"kvhint_router_policy_probation",
	"kvhint_router_policy_runs_skipped_total",
}

var (
	docRow     = regexp.MustCompile("^\\| `(kvhint_router_[a-z_]+)` \\| ([a-z]+) \\| (.*?) \\| (.*) \\|$")
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descHelp   = regexp.MustCompile(`help: "((?:[^"\\]|\\.)*)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// documented reads the sidecar's metrics from docs/reference/metrics.md.
func documented(t *testing.T) map[string]series {
	t.Helper()
	f, err := os.Open("../../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]series{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := docRow.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = series{Type: m[2], Labels: m[3], Help: strings.ReplaceAll(m[4], `\|`, "|")}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exported describes what m registers, as the reference writes it.
func exported(t *testing.T, m *Metrics) map[string]series {
	t.Helper()
	out := map[string]series{}
	for _, c := range m.collectors() {
		var typ string
		// A prometheus.Gauge has a Counter's methods too: it is asked first.
		switch c.(type) {
		case *prometheus.GaugeVec, prometheus.Gauge:
			typ = "gauge"
		case *prometheus.CounterVec, prometheus.Counter:
			typ = "counter"
		case *prometheus.HistogramVec, prometheus.Histogram:
			typ = "histogram"
		default:
			t.Fatalf("collector %T: no type known", c)
		}
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		d := (<-ch).String()
		name := descName.FindStringSubmatch(d)[1]
		labels := "none"
		if l := descLabels.FindStringSubmatch(d); l != nil && strings.TrimSpace(l[1]) != "" {
			var ls []string
			for _, x := range strings.Split(l[1], ",") {
				ls = append(ls, "`"+strings.TrimSpace(x)+"`")
			}
			labels = strings.Join(ls, ", ")
		}
		out[name] = series{Type: typ, Labels: labels, Help: strings.ReplaceAll(descHelp.FindStringSubmatch(d)[1], `\"`, `"`)}
	}
	return out
}

// TestDocumentedSeries: the dispatcher's metrics are exactly the listed
// ones, with the type, labels and help text docs/reference/metrics.md
// gives them, which the alerts and the dashboard read.
func TestDocumentedSeries(t *testing.T) {
	got := exported(t, New(nil))
	var names []string
	for n := range got {
		names = append(names, n)
	}
	if diff := cmp.Diff(dispatcherSeries, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("metrics exported (-want +got):\n%s", diff)
	}
	docs := documented(t)
	for _, n := range dispatcherSeries {
		d, ok := docs[n]
		if !ok {
			t.Errorf("%s is not in docs/reference/metrics.md", n)
			continue
		}
		if diff := cmp.Diff(d, got[n]); diff != "" {
			t.Errorf("%s (-documented +exported):\n%s", n, diff)
		}
	}
}

// TestBookingSeries: bookings count by role and outcome, refusals by
// reason, and each booking that ran policies is one build observation.
func TestBookingSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: dispatch.StaticWorkers{"w1": true, "w2": false}, Metrics: m})
	b := func(role, worker string) *dispatch.Booking {
		return &dispatch.Booking{RequestID: "r", Role: role, Worker: worker, Session: dispatchSession}
	}
	if _, err := d.Build(t.Context(), b("decode", "w1")); !errors.Is(err, dispatch.ErrNotReady) {
		t.Fatalf("before a load: %v, want ErrNotReady", err)
	}
	if err := d.Load([]byte("worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: [{type: kv-evict}]\n"), "test"); err != nil {
		t.Fatal(err)
	}
	for _, bk := range []*dispatch.Booking{b("decode", "w1"), b("decode", "w1"), b("decode", "w2"), b("decode", "w3"), b("prefill", "w1"), {}} {
		d.Build(t.Context(), bk)
	}
	d.RecordTooLargeBooking()
	for _, c := range []struct {
		vec    *prometheus.CounterVec
		labels []string
		want   float64
	}{
		{m.bookings, []string{"decode", "hinted"}, 2},
		{m.bookings, []string{"decode", "not_hint_capable"}, 1},
		{m.bookings, []string{"decode", "unknown_worker"}, 1},
		{m.bookingErrors, []string{"not_ready"}, 1},
		{m.bookingErrors, []string{"unknown_role"}, 1},
		{m.bookingErrors, []string{"invalid"}, 1},
		{m.bookingErrors, []string{"too_large"}, 1},
		{m.actions, []string{"decode", "kv-evict", "kv-evict"}, 2},
	} {
		if n := testutil.ToFloat64(c.vec.WithLabelValues(c.labels...)); n != c.want {
			t.Errorf("%v: %v, want %v", c.labels, n, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.buildSeconds); n != 1 {
		t.Errorf("hint_build_duration_seconds: %d series, want 1 (decode)", n)
	}
	if n, err := testutil.GatherAndCount(reg, "kvhint_router_config_info"); err != nil || n != 1 {
		t.Errorf("config_info: %d series (%v), want 1", n, err)
	}
}

// dispatchSession is a session's last turn, which kv-evict answers.
var dispatchSession = hints.Session{ID: "s", Turn: 2, Final: true}
