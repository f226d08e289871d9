package declared

import (
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// BenchmarkParse measures a declared provider's Parse against the linked
// provider of the same type, on the same parameters: the cost of checking
// a role's parameters with the API server's schema and CEL validation
// instead of compiled Go. Parse runs when a role is compiled, not per
// booking. Read the declared figures as a ratio to the linked ones of the
// same run.
func BenchmarkParse(b *testing.B) {
	linked := builtin.NewCatalog()
	decl := loadFile(b, builtinDeclaration).Catalog
	for _, tc := range []struct{ typ, params string }{
		{builtin.TypeKVRetain, `{"ttl_seconds": 60, "priority": 10}`},
		{builtin.TypeKVFetch, `{"min_blocks": 4, "max_blocks": 16}`},
		{builtin.TypeTwoTierCostFn, `{"adaptive": {"update_interval_ms": 50}, "cache_threshold": 0.5}`},
	} {
		for _, c := range []struct {
			name string
			cat  *hints.Catalog
		}{{"linked", linked}, {"declared", decl}} {
			b.Run(tc.typ+"/"+c.name, func(b *testing.B) {
				parse := parser(b, c.cat, tc.typ)
				raw := hints.Params(tc.params)
				b.ReportAllocs()
				for b.Loop() {
					if err := parse(raw); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func parser(b *testing.B, cat *hints.Catalog, typ string) func(hints.Params) error {
	if p, ok := cat.Hint(typ); ok {
		return func(raw hints.Params) error { _, err := p.Parse(raw); return err }
	}
	if p, ok := cat.Selection(typ); ok {
		return func(raw hints.Params) error { _, err := p.Parse(raw); return err }
	}
	b.Fatalf("no type %s", typ)
	return nil
}
