package builtin_test

import (
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

// TestConformance holds every built-in hint policy to the kit plugin
// authors run.
func TestConformance(t *testing.T) {
	suites := map[string]hintstest.Suite{
		"kv-fetch": {Params: []string{`{}`, `{"min_blocks": 4, "max_blocks": 100}`},
			BadParams: map[string]string{`{"min_blocks": 0}`: "min_blocks", `{"max_blocks": -1}`: "max_blocks"}},
		"kv-retain": {Params: []string{`{}`, `{"ttl_seconds": 600, "priority": 10, "min_prompt_tokens": 100}`},
			BadParams: map[string]string{`{"ttl_seconds": 0}`: "ttl_seconds", `{"priority": 101}`: "priority"}},
		"kv-evict": {},
	}
	cat := builtin.NewCatalog()
	for _, p := range cat.HintProviders() {
		s, ok := suites[p.Type]
		if !ok {
			t.Errorf("built-in %s has no conformance suite", p.Type)
			continue
		}
		t.Run(p.Type, func(t *testing.T) { hintstest.Run(t, *p, s) })
	}
}
