package dispatch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
// a role deletes their series; the policies and roles kept keep theirs.
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
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Metrics: NewMetrics(reg)})
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
