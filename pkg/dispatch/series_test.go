package dispatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// seriesLabels lists, for every series m holds, its role and policy
// labels ("role/policy", "role/" for a role's own series).
func seriesLabels(m *recordedMetrics) []string {
	seen := map[string]bool{}
	for _, k := range m.keys() {
		segs := strings.Split(k, "/")
		switch segs[0] {
		case "refusals":
		case "bookings", "build", "copies_dropped":
			seen[segs[1]+"/"] = true
		default:
			seen[segs[1]+"/"+segs[2]] = true
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
// a role tells the metrics to forget their series; the policies and roles
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
	m := newRecordedMetrics()
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Metrics: m})
	if err := d.Load(doc(0, true), "test"); err != nil {
		t.Fatal(err)
	}
	before := seriesLabels(m)
	if !slices.Contains(before, "decode/evict-0") || !slices.Contains(before, "prefill/kv-fetch") {
		t.Fatalf("series after the first load: %v", before)
	}
	if err := d.Load(doc(1, false), "test"); err != nil {
		t.Fatal(err)
	}
	got := seriesLabels(m)
	if want := []string{"decode/", "decode/evict-1", "decode/kv-retain"}; !slices.Equal(got, want) {
		t.Errorf("series after renaming evict-0 and dropping prefill: %v, want %v", got, want)
	}
}
