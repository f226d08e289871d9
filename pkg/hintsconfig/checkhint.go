package hintsconfig

import "github.com/kvrouter/kv-hint-operator/pkg/hints"

// CheckHint checks one hint policy instance on its own, with the rules a
// role applies to each of its items: the type is linked, the parameters
// parse and the name, if any, is a DNS label. The operator uses it for
// HintPolicy objects, which are valid or not before any role lists them.
// Problems carry no role and the hint index NoHint.
func CheckHint(cat *hints.Catalog, spec HintSpec) (*Hint, Problems) {
	c := roleCompiler{cat: cat}
	h := c.hint(NoHint, spec, map[string]seenHint{})
	if c.probs.HasErrors() {
		return nil, c.probs
	}
	return h, c.probs
}
