package configsource

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestTransitionPools: while the dispatcher swaps configs, each role of
// either config admits only the workers its pools of both admit, so no
// booking of the old config or the new one reaches a worker outside its
// role's pool; a role new to the config has its pool from the start.
func TestTransitionPools(t *testing.T) {
	sel := func(s string) labels.Selector {
		t.Helper()
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	got := transitionPools(
		[]string{"decode", "prefill", "encode"}, map[string]labels.Selector{"decode": sel("component=decode"), "prefill": sel("component=prefill"), "encode": sel("x=1")},
		[]string{"decode", "prefill", "aggregated"}, map[string]labels.Selector{"decode": sel("component=decode,gen=2"), "aggregated": sel("component=agg")},
	)
	for _, tc := range []struct {
		role   string
		worker labels.Set
		in     bool
	}{
		{"decode", labels.Set{"component": "decode"}, false}, // the old pool's worker, outside the new one
		{"decode", labels.Set{"component": "decode", "gen": "2"}, true},
		{"prefill", labels.Set{"component": "prefill"}, true}, // the new config has no selector: the old one holds
		{"prefill", labels.Set{"component": "decode"}, false}, // ... so no other worker yet
		{"aggregated", labels.Set{"component": "agg"}, true},  // new to the config: its pool from the start
		{"aggregated", labels.Set{"component": "other"}, false},
		{"encode", labels.Set{"x": "1"}, true}, // leaving the config: its old pool still holds
		{"encode", labels.Set{"x": "2"}, false},
	} {
		p, ok := got[tc.role]
		if !ok {
			t.Fatalf("role %s has no pool in the transition", tc.role)
		}
		if p.Matches(tc.worker) != tc.in {
			t.Errorf("role %s, worker %v: in pool %v, want %v (pool %s)", tc.role, tc.worker, !tc.in, tc.in, p)
		}
	}
	// A role without a selector in both configs admits every worker, as it
	// does in each: it has no entry.
	open := transitionPools([]string{"decode"}, nil, []string{"decode"}, nil)
	if _, ok := open["decode"]; ok {
		t.Errorf("a role with no selector in either config got a pool: %v", open)
	}
	// Nothing and anything together is nothing.
	if both(labels.Nothing(), labels.Everything()).Matches(labels.Set{}) {
		t.Error("Nothing together with Everything matched a worker")
	}
}
