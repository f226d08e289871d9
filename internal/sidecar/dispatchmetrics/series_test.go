package dispatchmetrics

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// seriesLabels lists, for every series in reg, its role and policy labels
// ("role/policy", "role/" for a role's own series).
func seriesLabels(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var role, policy string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "role":
					role = l.GetValue()
				case "policy":
					policy = l.GetValue()
				}
			}
			if role != "" {
				seen[role+"/"+policy] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestReloadDeletesRemovedSeries: a reload that renames a policy and drops
// a role deletes their series from the registry; the policies and roles
// kept keep theirs.
func TestReloadDeletesRemovedSeries(t *testing.T) {
	doc := func(tag int, prefill bool) []byte {
		s := fmt.Sprintf(`
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-evict
        name: evict-%d
      - type: kv-retain
        parameters: {ttl_seconds: 60}
`, tag)
		if prefill {
			s += `
  prefill:
    type: kvcr
    hints:
      - type: kv-fetch
`
		}
		return []byte(s)
	}
	reg := prometheus.NewRegistry()
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Metrics: New(reg)})
	if err := d.Load(doc(0, true), "test"); err != nil {
		t.Fatal(err)
	}
	before := seriesLabels(t, reg)
	if !slices.Contains(before, "decode/evict-0") || !slices.Contains(before, "prefill/kv-fetch") {
		t.Fatalf("series after the first load: %v", before)
	}
	if err := d.Load(doc(1, false), "test"); err != nil {
		t.Fatal(err)
	}
	got := seriesLabels(t, reg)
	if want := []string{"decode/", "decode/evict-1", "decode/kv-retain"}; !slices.Equal(got, want) {
		t.Errorf("series after renaming evict-0 and dropping prefill: %v, want %v", got, want)
	}
}

// TestReloadSeries: loads, a refused document, a revert to the config in
// force and a source error move config_reloads_total,
// config_last_reload_successful and config_info as the reference says.
func TestReloadSeries(t *testing.T) {
	const good = "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n"
	const other = "worker_selection:\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: []\n"
	const bad = "worker_selection:\n  decode:\n    type: no-such-selection\n"
	reg := prometheus.NewRegistry()
	m := New(reg)
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Metrics: m})
	reloads := func(result string) float64 { return testutil.ToFloat64(m.reloads.WithLabelValues(result)) }
	ok := func() float64 { return testutil.ToFloat64(m.lastReloadOK) }
	info := func() []string {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var hashes []string
		for _, f := range fams {
			if f.GetName() == "kvhint_router_config_info" {
				for _, s := range f.GetMetric() {
					hashes = append(hashes, s.GetLabel()[0].GetValue())
				}
			}
		}
		return hashes
	}

	before := time.Now()
	if err := d.Load([]byte(good), "test"); err != nil {
		t.Fatal(err)
	}
	if reloads("success") != 1 || ok() != 1 || !slices.Equal(info(), []string{d.ConfigHash()}) {
		t.Fatalf("after a load: successes %v, last_reload_successful %v, config_info %v; want 1, 1, [%s]", reloads("success"), ok(), info(), d.ConfigHash())
	}
	if at := testutil.ToFloat64(m.lastReloadSuccess); at < float64(before.Unix()) {
		t.Errorf("config_last_reload_success_timestamp_seconds %v, before the load (%v)", at, before.Unix())
	}
	d.Load([]byte(bad), "test")
	d.Load([]byte(bad), "test")
	if reloads("failure") != 1 || ok() != 0 || testutil.ToFloat64(m.lastReloadFailure) < float64(before.Unix()) {
		t.Errorf("a bad document read twice: failures %v, last_reload_successful %v, failure time %v; want 1, 0, now",
			reloads("failure"), ok(), testutil.ToFloat64(m.lastReloadFailure))
	}
	d.Load([]byte(good), "test")
	if reloads("success") != 2 || ok() != 1 || !slices.Equal(info(), []string{d.ConfigHash()}) {
		t.Errorf("a revert: successes %v, last_reload_successful %v, config_info %v; want 2, 1, one hash", reloads("success"), ok(), info())
	}
	d.RecordSourceError("test", errors.New("file vanished"))
	if reloads("failure") != 2 || ok() != 0 {
		t.Errorf("a source error: failures %v, last_reload_successful %v; want 2, 0", reloads("failure"), ok())
	}
	if err := d.Load([]byte(other), "test"); err != nil {
		t.Fatal(err)
	}
	if got := info(); !slices.Equal(got, []string{d.ConfigHash()}) {
		t.Errorf("config_info after a new config: %v, want only %s", got, d.ConfigHash())
	}
}
