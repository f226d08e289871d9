package declared

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// manyPatterns writes a declaration of types hint types of props string
// parameters each, every one with a pattern of its own whose compiled
// program is large for its text ([a-z]{1,1000}: about two thousand
// instructions from 14 bytes), and a default that matches it, so that
// loading validates the default against the pattern. tag makes the
// patterns of two calls distinct.
func manyPatterns(tag string, types, props int) []byte {
	return hintTypes(types, func(b *strings.Builder, t int) {
		fmt.Fprintf(b, "  - type: h%d\n    parameters:\n      type: object\n      properties:\n", t)
		for p := range props {
			fmt.Fprintf(b, "        p%d: {type: string, pattern: '^[a-z]{1,1000}%s%d$', default: a%s%d}\n", p, tag, t*props+p, tag, t*props+p)
		}
	})
}

// heapInUse returns the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestPatternsReleasedWithCatalog: a declaration of 1,500 distinct
// patterns, within every other limit of the default budget, keeps what
// its estimate says while loaded, and nothing once dropped. The API
// server's validation compiles each pattern into a process-wide cache
// that is never emptied, so a catalog's patterns stayed after it was
// dropped (about 130 KB each: 196 MB for this 126 KB text) and a tenant
// that edits its ConfigMap grew the manager without end.
func TestPatternsReleasedWithCatalog(t *testing.T) {
	const slack = 4 << 20 // what a collection leaves as noise
	data := manyPatterns("x", 15, 100)
	if len(data) > DefaultBudget().DocumentBytes {
		t.Fatalf("the text is %d bytes, over the default budget; the probe must be within it", len(data))
	}
	doc := mustParse(t, data)
	u := Measure(doc)

	// Within the default budget: refused by counting, or loaded; either
	// way nothing stays once it is dropped.
	before := heapInUse()
	cat, err := Load(data)
	if err == nil {
		parseAll(t, cat)
	}
	cat = nil
	if grew := heapInUse() - before; grew > slack {
		t.Errorf("the default budget (load error: %v): %s stayed after the declaration was dropped, want under %s", err, Bytes(grew), Bytes(slack))
	}

	// Without a budget it loads: while it is held the heap grows by no
	// more than the estimate, and once dropped it goes back.
	for _, tag := range []string{"y", "z"} {
		data := manyPatterns(tag, 15, 100)
		before := heapInUse()
		cat, err := Budget{}.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		parseAll(t, cat)
		held := heapInUse() - before
		runtime.KeepAlive(cat)
		cat = nil
		after := heapInUse() - before
		t.Logf("patterns %s: held %s (estimate %s), after it was dropped %s", tag, Bytes(held), Bytes(u.RetainedBytes), Bytes(after))
		if held > u.RetainedBytes {
			t.Errorf("patterns %s: held, the declaration keeps %s, over its estimate of %s", tag, Bytes(held), Bytes(u.RetainedBytes))
		}
		if after > slack {
			t.Errorf("patterns %s: %s stayed after the declaration was dropped, want under %s", tag, Bytes(after), Bytes(slack))
		}
	}
}

// parseAll checks every declared hint type's defaults, as a role that
// lists the type with no parameters does, so that every pattern is
// matched at least once.
func parseAll(t *testing.T, cat *Catalog) {
	t.Helper()
	for _, p := range cat.Catalog.HintProviders() {
		if _, err := p.Parse(hints.Params(`{}`)); err != nil {
			t.Fatalf("%s: %v", p.Type, err)
		}
	}
}

// TestPatterns: patterns are checked as the API server checks them, by
// this package: a pattern that does not compile, a default it refuses and
// a pattern under a junctor are refused at load, naming the place; a
// parameter it refuses is worded as the API server words it; and the
// budget counts what compiled patterns keep.
func TestPatterns(t *testing.T) {
	decl := func(prop string) []byte {
		return []byte(header + "workerSelections:\n  - type: pick\nhints:\n  - type: h\n    parameters:\n      type: object\n      properties:\n        " + prop + "\n")
	}
	for _, tc := range []struct {
		name, prop string
		want       string
	}{
		{"invalid", `p: {type: string, pattern: "a("}`, "line 10: hints[0].parameters.properties.p.pattern: Invalid value: \"a(\": must be a valid regular expression: error parsing regexp: missing closing ): `a(`"},
		{"default refused", `p: {type: string, pattern: "^a+$", default: b}`, `hints[0].parameters.properties.p.default: Invalid value: "b": default in body should match '^a+$'`},
		{"nested default refused", `p: {type: object, properties: {q: {type: string, pattern: "^a+$"}}, default: {q: b}}`, `hints[0].parameters.properties.p.default: Invalid value: "b": default.q in body should match '^a+$'`},
		{"under a junctor", `p: {type: string, anyOf: [{pattern: "^a+$"}]}`, "hints[0].parameters.properties.p.anyOf[0].pattern: not supported under allOf, anyOf, oneOf or not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(decl(tc.prop))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to hold %s", err, tc.want)
			}
		})
	}

	cat, err := Load(decl(`p: {type: array, maxItems: 4, items: {type: string, pattern: "^[a-z]+$"}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := cat.Catalog.Hint("h")
	for _, tc := range []struct{ params, want string }{
		{`{"p": ["ok", "ok"]}`, ""},
		{`{"p": ["ok", "NO"]}`, `parameter "p[1]": Invalid value: "NO": parameters.p[1] in body should match '^[a-z]+$'`},
	} {
		_, err := p.Parse(hints.Params(tc.params))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) || (tc.want == "") != (err == nil) {
			t.Errorf("%s: error %v, want %q", tc.params, err, tc.want)
		}
	}

	_, err = Load(manyPatterns("b", 15, 100))
	if want := "1500 patterns of about 3013890 compiled instructions), over the budget of 8Mi (--catalog-max-memory)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("1,500 large patterns: %v\nwant the memory budget's refusal: %s", err, want)
	}
}

// TestEstimateCalibrated: the estimate of what a loaded declaration
// keeps bounds what it keeps, measured as heap after a collection, and
// is not much more (at most 1.5 times), for each kind of cost: CEL rules,
// schema nodes, patterns. Declarations are loaded four at a time, so
// that what is measured stands well above a collection's noise.
func TestEstimateCalibrated(t *testing.T) {
	for _, tc := range []struct {
		name string
		data func(i int) []byte
	}{
		{"8 types x 16 rules", func(int) []byte { return manyRules(8, 16) }},
		{"16 types x 100 properties", func(int) []byte { return manyProperties(16, 100) }},
		{"4 types x 10 patterns", func(i int) []byte { return manyPatterns(fmt.Sprint("c", i), 4, 10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4
			u := Measure(mustParse(t, tc.data(0)))
			before := heapInUse()
			var kept []*Catalog
			for i := range n {
				cat, err := Budget{}.Load(tc.data(i))
				if err != nil {
					t.Fatal(err)
				}
				kept = append(kept, cat)
			}
			each := (heapInUse() - before) / n
			runtime.KeepAlive(kept)
			t.Logf("keeps %s each, estimate %s (%.2fx)", Bytes(each), Bytes(u.RetainedBytes), float64(u.RetainedBytes)/float64(each))
			if u.RetainedBytes < each || float64(u.RetainedBytes) > 1.5*float64(each) {
				t.Errorf("the estimate %d is not between the %d kept and 1.5 times that", u.RetainedBytes, each)
			}
		})
	}
}

// manyRuleRegexes writes a declaration of types hint types of rules CEL
// rules each, every rule with per distinct constant regexes (matches,
// find, findAll) as large for their text as manyPatterns' patterns. The
// API server's CEL compiles a constant regex into the rule's program,
// and the program is kept with the catalog.
func manyRuleRegexes(tag string, types, rules, per int) []byte {
	return regexRules(tag, types, rules, per, func(b *strings.Builder, k, n int) {
		if k > 0 {
			b.WriteString(" || ")
		}
		switch k % 3 {
		case 0:
			fmt.Fprintf(b, "self.s.matches('^[a-z]{1,1000}%s%d$')", tag, n)
		case 1:
			fmt.Fprintf(b, "self.s.find('[a-z]{1,1000}%s%d') != ''", tag, n)
		default:
			fmt.Fprintf(b, "size(self.s.findAll('[a-z]{1,1000}%s%d')) > 0", tag, n)
		}
	}, "        - rule: \"", " || true\"\n")
}

// manyMessageRegexes is manyRuleRegexes with the regexes in each rule's
// messageExpression rather than in the rule.
func manyMessageRegexes(tag string, types, rules, per int) []byte {
	return regexRules(tag, types, rules, per, func(b *strings.Builder, _, n int) {
		fmt.Fprintf(b, "self.s.matches('^[a-z]{1,1000}%s%d$') ? 'm%d' : ", tag, n, n)
	}, "        - rule: \"self.s != ''\"\n          messageExpression: \"", "'none'\"\n")
}

// regexRules writes types hint types of rules CEL validations each: open,
// then per regexes by term (k, the regex's index in its rule; n, its
// number in the declaration), then close.
func regexRules(tag string, types, rules, per int, term func(b *strings.Builder, k, n int), open, close string) []byte {
	return hintTypes(types, func(b *strings.Builder, t int) {
		fmt.Fprintf(b, "  - type: h%d\n    parameters:\n      type: object\n      properties:\n        s: {type: string, maxLength: 64, default: a}\n      x-kubernetes-validations:\n", t)
		for r := range rules {
			b.WriteString(open)
			for k := range per {
				term(b, k, (t*rules+r)*per+k)
			}
			b.WriteString(close)
		}
	})
}

// TestMessageRegexesCounted: constant regexes in a rule's
// messageExpression are compiled with the rule and counted as the rule's
// own are: the same 336 regexes, moved there, are refused by the default
// budget too.
func TestMessageRegexesCounted(t *testing.T) {
	data := manyMessageRegexes("m", 8, 14, 3)
	u := Measure(mustParse(t, data))
	if u.Patterns < 336 || u.PatternInsts < 336*2000 {
		t.Errorf("counted %d patterns of %d instructions; want the 336 constant regexes of the message expressions, about 2,000 instructions each", u.Patterns, u.PatternInsts)
	}
	_, err := Load(data)
	if err == nil || !strings.Contains(err.Error(), "--catalog-max-memory") {
		t.Errorf("the default budget: %v; want a refusal by --catalog-max-memory", err)
	}
	cat, err := Budget{}.Load(data)
	if err != nil {
		t.Fatalf("without a budget the declaration loads (its message expressions compile): %v", err)
	}
	parseAll(t, cat)
}

// TestRuleRegexesCounted: constant regexes in CEL rules are counted as
// patterns are. A declaration of 112 rules with 336 of them, within every
// count of the default budget, was estimated at 3.3 MB and kept ten
// times that; now the estimate counts their compiled programs, the
// default budget refuses it, and loaded without a budget it keeps no more
// than its estimate.
func TestRuleRegexesCounted(t *testing.T) {
	data := manyRuleRegexes("x", 8, 14, 3)
	doc := mustParse(t, data)
	u := Measure(doc)
	if u.Patterns < 336 || u.PatternInsts < 336*2000 {
		t.Errorf("counted %d patterns of %d instructions; want the 336 constant regexes of the rules, about 2,000 instructions each", u.Patterns, u.PatternInsts)
	}
	_, err := Load(data)
	if err == nil || !strings.Contains(err.Error(), "--catalog-max-memory") {
		t.Errorf("the default budget: %v; want a refusal by --catalog-max-memory", err)
	}

	for _, tag := range []string{"y", "z"} {
		data := manyRuleRegexes(tag, 8, 14, 3)
		before := heapInUse()
		cat, err := Budget{}.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		parseAll(t, cat)
		held := heapInUse() - before
		runtime.KeepAlive(cat)
		t.Logf("rule regexes %s: held %s (estimate %s)", tag, Bytes(held), Bytes(u.RetainedBytes))
		if held > u.RetainedBytes {
			t.Errorf("rule regexes %s: held, the declaration keeps %s, over its estimate of %s", tag, Bytes(held), Bytes(u.RetainedBytes))
		}
	}
}
