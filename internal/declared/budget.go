package declared

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Budget bounds what loading one declaration may cost, checked on the
// parsed text before any schema is built or CEL expression compiled, so
// that a declaration over it costs a count, not a compile.
//
// Compiling is what costs: each CEL rule is compiled twice (once by the
// API server's CRD validation, once for the validator that is kept), about
// 180 KiB allocated and 20-24 KiB kept per rule, and a schema node costs
// about 1 KiB kept and 18 KiB allocated (measured on 128 types x 15 rules
// and on 128 types x 100 properties; docs/benchmarks.md, issue 28). A
// declaration's CEL cost at evaluation is bounded already, per rule at
// compile time by the API server's per-call limit and per check by its
// runtime budget; what the count of rules and the text of rules bound is
// the cost of compiling and keeping them, which grows with the size of
// the expressions (the text) and their number.
type Budget struct {
	// DocumentBytes caps the declaration's text, below MaxDocumentBytes:
	// it is the one limit checked before the text is parsed, and parsing
	// 1 MiB of YAML costs about 60 MB of allocation on its own.
	DocumentBytes int
	// RulesPerType caps the CEL rules of one type: every
	// x-kubernetes-validations rule in its parameter schema, and its
	// commitsKVCopies expression.
	RulesPerType int
	// Rules caps the CEL rules of the whole declaration.
	Rules int
	// RuleBytes caps the text of all CEL rules together.
	RuleBytes int
	// SchemaNodes caps the schema nodes (each schema object, nested ones
	// included) of the whole declaration.
	SchemaNodes int
	// RetainedBytes caps the memory a loaded declaration is estimated to
	// keep (Usage.RetainedBytes).
	RetainedBytes int64

	// admit, when set, is asked after the checks and before the build.
	admit func(Usage) error
}

// WithAdmission returns b that, once a declaration passes its checks and
// before anything is compiled, asks admit, and refuses the declaration
// with admit's error: for a caller that bounds what many declarations
// keep together.
func (b Budget) WithAdmission(admit func(Usage) error) Budget {
	b.admit = admit
	return b
}

// DefaultBudget keeps one loaded declaration under about 8 MiB and one
// load under about half a second of CPU, a hundred times what the
// builtin and Dynamo declarations of config/catalogs need (5 rules, 7 KB),
// so that the manager's shipped memory limit (256Mi) holds the worst a
// namespace can declare (the manager bounds the sum per namespace and in
// all as well).
func DefaultBudget() Budget {
	return Budget{
		DocumentBytes: 128 << 10,
		RulesPerType:  16,
		Rules:         128,
		RuleBytes:     16 << 10,
		SchemaNodes:   2048,
		RetainedBytes: 8 << 20,
	}
}

// Estimate of what a loaded declaration keeps, by what it holds: about
// 1.2 times the heap measured after a collection (TestEstimateCalibrated:
// 8 types x 16 rules keep 2.7 MiB, 16 types x 100 properties 1.8 MiB), so
// that the estimate bounds what is kept without doubling it, and the
// manager's budgets in bytes are bytes of heap.
const (
	retainedPerType     = 8 << 10
	retainedPerNode     = 1280
	retainedPerRule     = 24 << 10
	retainedPerRuleByte = 32
	// A compiled pattern keeps its program, and a second one when it is
	// one-pass (most anchored patterns are): 44 bytes per instruction as
	// patternInsts estimates them, measured on 1,500 [a-z]{1,1000}
	// patterns (137 MB; TestPatternsReleasedWithCatalog), counted at 56.
	retainedPerPattern     = 1 << 10
	retainedPerPatternInst = 56
)

// Usage is what a declaration holds, counted on its parsed text.
type Usage struct {
	// Types is the number of declared types, of both kinds.
	Types int
	// Rules is the number of CEL rules, commitsKVCopies included.
	Rules int
	// RuleBytes is the length of all CEL rules together.
	RuleBytes int
	// SchemaNodes is the number of schema nodes.
	SchemaNodes int
	// Patterns is the number of pattern keywords and of constant regexes
	// in CEL rules (see ruleRegexes), and PatternInsts the instructions
	// their compiled programs are estimated to hold.
	Patterns     int
	PatternInsts int64
	// RetainedBytes is the memory the loaded declaration is estimated to
	// keep.
	RetainedBytes int64
	// typeRules is the number of rules of each type, selections first.
	typeRules []int
}

// Measure counts what a parsed declaration holds, without building it.
func Measure(doc *Document) Usage {
	var u Usage
	add := func(s *apiextensionsv1.JSONSchemaProps, extra string) {
		c := schemaCount{}
		c.walk(s, 0)
		if extra != "" {
			c.rules++
			c.ruleBytes += len(extra)
		}
		u.Types++
		u.Rules += c.rules
		u.RuleBytes += c.ruleBytes
		u.SchemaNodes += c.nodes
		u.Patterns += c.patterns
		u.PatternInsts += c.patternInsts
		u.typeRules = append(u.typeRules, c.rules)
	}
	for _, s := range doc.WorkerSelections {
		add(s.Parameters, s.CommitsKVCopies)
	}
	for _, h := range doc.Hints {
		add(h.Parameters, "")
	}
	u.RetainedBytes = int64(u.Types)*retainedPerType + int64(u.SchemaNodes)*retainedPerNode +
		int64(u.Rules)*retainedPerRule + int64(u.RuleBytes)*retainedPerRuleByte +
		int64(u.Patterns)*retainedPerPattern + u.PatternInsts*retainedPerPatternInst
	return u
}

// maxWalkDepth stops counting below a depth no schema needs; the YAML
// parser refuses far deeper nesting than this before Measure runs, and
// the API server's checks refuse what is left.
const maxWalkDepth = 64

type schemaCount struct {
	nodes, rules, ruleBytes, patterns int
	patternInsts                      int64
}

func (c *schemaCount) walk(s *apiextensionsv1.JSONSchemaProps, depth int) {
	if s == nil || depth > maxWalkDepth {
		return
	}
	c.nodes++
	if s.Pattern != "" {
		c.patterns++
		c.patternInsts += patternInsts(s.Pattern)
	}
	for _, r := range s.XValidations {
		c.rules++
		c.ruleBytes += len(r.Rule) + len(r.MessageExpression)
		// A messageExpression is compiled with its rule and kept in the
		// same program set, constant regexes and all.
		for _, expr := range []string{r.Rule, r.MessageExpression} {
			for _, re := range ruleRegexes(expr) {
				c.patterns++
				c.patternInsts += patternInsts(re)
			}
		}
	}
	for k := range s.Properties {
		p := s.Properties[k]
		c.walk(&p, depth+1)
	}
	for k := range s.PatternProperties {
		p := s.PatternProperties[k]
		c.walk(&p, depth+1)
	}
	for k := range s.Definitions {
		p := s.Definitions[k]
		c.walk(&p, depth+1)
	}
	if s.Items != nil {
		c.walk(s.Items.Schema, depth+1)
		for i := range s.Items.JSONSchemas {
			c.walk(&s.Items.JSONSchemas[i], depth+1)
		}
	}
	if s.AdditionalProperties != nil {
		c.walk(s.AdditionalProperties.Schema, depth+1)
	}
	if s.AdditionalItems != nil {
		c.walk(s.AdditionalItems.Schema, depth+1)
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range list {
			c.walk(&list[i], depth+1)
		}
	}
	c.walk(s.Not, depth+1)
}

// Check returns a problem for each limit of the budget the usage passes,
// naming the limit, the figures and the manager's and validate's flag
// that raises it. A limit of 0 or less is no limit.
func (b Budget) Check(doc *Document, u Usage) []Problem {
	var probs []Problem
	over := func(limit, got int64) bool { return limit > 0 && got > limit }
	if b.RulesPerType > 0 {
		for i, n := range u.typeRules {
			if n <= b.RulesPerType {
				continue
			}
			path := fmt.Sprintf("workerSelections[%d]", i)
			if i >= len(doc.WorkerSelections) {
				path = fmt.Sprintf("hints[%d]", i-len(doc.WorkerSelections))
			}
			probs = append(probs, Problem{Path: path, Message: fmt.Sprintf(
				"declares %d CEL rules, over the budget of %d rules per type (--catalog-max-rules-per-type)", n, b.RulesPerType)})
			if len(probs) >= 3 {
				probs = append(probs, Problem{Message: "further types over the per-type budget are not listed"})
				break
			}
		}
	}
	if over(int64(b.Rules), int64(u.Rules)) {
		probs = append(probs, Problem{Message: fmt.Sprintf(
			"the declaration holds %d CEL rules in %d types, over the budget of %d (--catalog-max-rules)", u.Rules, u.Types, b.Rules)})
	}
	if over(int64(b.RuleBytes), int64(u.RuleBytes)) {
		probs = append(probs, Problem{Message: fmt.Sprintf(
			"its CEL rules are %d bytes of text together, over the budget of %d (--catalog-max-rule-bytes)", u.RuleBytes, b.RuleBytes)})
	}
	if over(int64(b.SchemaNodes), int64(u.SchemaNodes)) {
		probs = append(probs, Problem{Message: fmt.Sprintf(
			"its parameter schemas hold %d schema nodes, over the budget of %d (--catalog-max-schema-nodes)", u.SchemaNodes, b.SchemaNodes)})
	}
	if over(b.RetainedBytes, u.RetainedBytes) {
		probs = append(probs, Problem{Message: fmt.Sprintf(
			"loaded, it would keep about %s (%d types, %d schema nodes, %d CEL rules, %d patterns of about %d compiled instructions), over the budget of %s (--catalog-max-memory)",
			Bytes(u.RetainedBytes), u.Types, u.SchemaNodes, u.Rules, u.Patterns, u.PatternInsts, Bytes(b.RetainedBytes))})
	}
	return probs
}

// CheckSize returns the problem of a text over DocumentBytes, or nil.
func (b Budget) CheckSize(n int) []Problem {
	if b.DocumentBytes > 0 && n > b.DocumentBytes {
		return []Problem{{Message: fmt.Sprintf(
			"the declaration is %d bytes, over the budget of %d (--catalog-max-bytes)", n, b.DocumentBytes)}}
	}
	return nil
}

// Bytes writes a byte count as a quantity, such as 8Mi.
func Bytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}
