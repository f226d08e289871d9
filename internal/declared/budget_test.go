package declared

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestBudgetRefusesManyRules: the many-rules declarations that took
// seconds and hundreds of MB to load are refused by counting, with the
// limit and the figures named, and within budget a declaration loads.
func TestBudgetRefusesManyRules(t *testing.T) {
	for _, tc := range []struct {
		name         string
		types, rules int
		want         []string
	}{
		{"1 MB, 128 types x 125 rules", 128, 125, []string{
			fmt.Sprintf("the declaration is %d bytes, over the budget of 131072 (--catalog-max-bytes)", len(manyRules(128, 125)))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(manyRules(tc.types, tc.rules))
			derr, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(derr.Error(), w) {
					t.Errorf("error %q\nlacks %q", derr.Error(), w)
				}
			}
		})
	}
	// Without the size limit, the count refuses the same text.
	b := DefaultBudget()
	b.DocumentBytes = 0
	for _, tc := range []struct {
		name         string
		types, rules int
		want         []string
	}{
		{"1 MB, 128 types x 125 rules, counted", 128, 125, []string{
			"line 6: hints[0]: declares 125 CEL rules, over the budget of 16 rules per type (--catalog-max-rules-per-type)",
			"the declaration holds 16000 CEL rules in 129 types, over the budget of 128 (--catalog-max-rules)",
			"over the budget of 8Mi (--catalog-max-memory)"}},
		{"139 KB, 128 types x 15 rules", 128, 15, []string{
			"the declaration holds 1920 CEL rules in 129 types, over the budget of 128 (--catalog-max-rules)"}},
		{"rules per type", 2, 17, []string{"hints[1]: declares 17 CEL rules, over the budget of 16 rules per type"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Load(manyRules(tc.types, tc.rules))
			derr, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(derr.Error(), w) {
					t.Errorf("error %q\nlacks %q", derr.Error(), w)
				}
			}
		})
	}
	if _, err := Load(manyRules(8, 16)); err != nil {
		t.Errorf("8 types x 16 rules (128 in all) is within budget: %v", err)
	}
}

// TestBudgetSchemaNodes: a declaration of many properties and no rules is
// refused by its schema nodes.
func TestBudgetSchemaNodes(t *testing.T) {
	b := DefaultBudget()
	b.DocumentBytes = 0
	_, err := b.Load(manyProperties(128, 100))
	if err == nil || !strings.Contains(err.Error(), "its parameter schemas hold 12928 schema nodes, over the budget of 2048 (--catalog-max-schema-nodes)") {
		t.Errorf("error %v, want the schema-node budget", err)
	}
}

// TestBudgetShippedCatalogs: the declarations config/catalogs ships are
// well within the default budget, and a budget set to what they hold,
// less one rule, refuses them: the limits are checked, not only printed.
func TestBudgetShippedCatalogs(t *testing.T) {
	for _, f := range []string{"../../config/catalogs/builtin.yaml", "../../config/catalogs/dynamo.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Load(data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b := DefaultBudget()
		b.Rules = 1
		if _, err := b.Load(data); err == nil || !strings.Contains(err.Error(), "over the budget of 1 (--catalog-max-rules)") {
			t.Errorf("%s with a budget of 1 rule: %v", f, err)
		}
		b = Budget{} // no limits
		if _, err := b.Load(manyRules(4, 20)); err != nil {
			t.Errorf("no budget: %v", err)
		}
	}
}

// BenchmarkBudgetRefusal measures refusing the many-rules declarations:
// the 1 MB one by its size, and by counting when the size limit is off;
// the 139 KB one (128 types x 15 rules) likewise.
func BenchmarkBudgetRefusal(b *testing.B) {
	noSize := DefaultBudget()
	noSize.DocumentBytes = 0
	for _, tc := range []struct {
		name   string
		data   []byte
		budget Budget
	}{
		{"1MB/size", manyRules(128, 125), DefaultBudget()},
		{"1MB/count", manyRules(128, 125), noSize},
		{"139KB/size", manyRules(128, 15), DefaultBudget()},
		{"139KB/count", manyRules(128, 15), noSize},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.budget.Load(tc.data); err == nil {
					b.Fatal("loaded")
				}
			}
		})
	}
}

// BenchmarkLoadAtBudget measures loading a declaration at the default
// budget's rule limits (8 types x 16 rules), the most CEL a manager
// compiles for one declaration by default, and reports the heap it keeps.
func BenchmarkLoadAtBudget(b *testing.B) {
	data := manyRules(8, 16)
	var kept []*Catalog
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	for b.Loop() {
		cat, err := Load(data)
		if err != nil {
			b.Fatal(err)
		}
		kept = append(kept, cat)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(len(kept)), "kept-B/op")
	if u := Measure(mustParse(b, data)); u.RetainedBytes < int64(after.HeapAlloc-before.HeapAlloc)/int64(len(kept)) {
		b.Errorf("the estimate %d is below the %d kept", u.RetainedBytes, (after.HeapAlloc-before.HeapAlloc)/uint64(len(kept)))
	}
}

func mustParse(b testing.TB, data []byte) *Document {
	var doc Document
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		b.Fatal(err)
	}
	return &doc
}
