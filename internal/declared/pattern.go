package declared

import (
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	celparser "github.com/google/cel-go/parser"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Patterns are checked here, not by the API server's validation: that
// compiles each pattern it meets into a cache of its own, shared by the
// whole process and never emptied, so what a declaration's patterns cost
// would stay after the declaration is gone, and a tenant that edits its
// ConfigMap would grow the manager without end. So the schema handed to
// the API server's code carries no pattern; each declaration compiles its
// own, with Go's regexp (the API server's engine too: same syntax, same
// matches), into a patternSet that goes with its catalog, and the budget
// counts what they keep (patternCost).

// patternSet holds a declaration's compiled patterns, by text.
type patternSet map[string]*regexp.Regexp

// compile compiles every pattern of a parameter schema into ps, and
// returns a copy of the schema without patterns for the API server's
// code, or the problems: a pattern that does not compile, or one under
// allOf, anyOf, oneOf or not, which this package does not check. path is
// where the schema is in the declaration.
func (ps patternSet) compile(in *apiextensionsv1.JSONSchemaProps, path string) (*apiextensionsv1.JSONSchemaProps, []string) {
	out := in.DeepCopy()
	var probs []string
	var walk func(s *apiextensionsv1.JSONSchemaProps, path string, junctor bool)
	walk = func(s *apiextensionsv1.JSONSchemaProps, path string, junctor bool) {
		if s == nil {
			return
		}
		if s.Pattern != "" {
			switch {
			case junctor:
				probs = append(probs, fmt.Sprintf("%s.pattern: not supported under allOf, anyOf, oneOf or not; put the pattern on the property itself", path))
			case ps[s.Pattern] == nil:
				re, err := regexp.Compile(s.Pattern)
				if err != nil {
					probs = append(probs, fmt.Sprintf("%s.pattern: Invalid value: %q: must be a valid regular expression: %v", path, s.Pattern, err))
				} else {
					ps[s.Pattern] = re
				}
			}
			s.Pattern = ""
		}
		for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[k]
			walk(&p, path+".properties."+k, junctor)
			s.Properties[k] = p
		}
		if s.Items != nil {
			walk(s.Items.Schema, path+".items", junctor)
			for i := range s.Items.JSONSchemas {
				walk(&s.Items.JSONSchemas[i], fmt.Sprintf("%s.items[%d]", path, i), junctor)
			}
		}
		if s.AdditionalProperties != nil {
			walk(s.AdditionalProperties.Schema, path+".additionalProperties", junctor)
		}
		for name, list := range map[string][]apiextensionsv1.JSONSchemaProps{"allOf": s.AllOf, "anyOf": s.AnyOf, "oneOf": s.OneOf} {
			for i := range list {
				walk(&list[i], fmt.Sprintf("%s.%s[%d]", path, name, i), true)
			}
		}
		walk(s.Not, path+".not", true)
	}
	walk(out, path, false)
	return out, probs
}

// check returns the problem of each string in v that the pattern of its
// schema node does not match, at p: worded as the API server words it.
func (ps patternSet) check(v any, s *schema.Structural, p *field.Path) field.ErrorList {
	if s == nil || len(ps) == 0 {
		return nil
	}
	var errs field.ErrorList
	switch x := v.(type) {
	case string:
		if s.ValueValidation != nil && s.ValueValidation.Pattern != "" {
			if re := ps[s.ValueValidation.Pattern]; re != nil && !re.MatchString(x) {
				errs = append(errs, field.Invalid(p, x, fmt.Sprintf("%s in body should match '%s'", p, s.ValueValidation.Pattern)))
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			errs = append(errs, ps.check(x[k], propertySchema(s, k), p.Child(k))...)
		}
	case []any:
		for i, e := range x {
			errs = append(errs, ps.check(e, s.Items, p.Index(i))...)
		}
	}
	return errs
}

// checkDefaults returns a problem for each default in a structural schema
// that its patterns refuse, as the API server's CRD validation refuses a
// default its schema refuses. path is where s is in the declaration.
func (ps patternSet) checkDefaults(s *schema.Structural, path string) []string {
	if s == nil || len(ps) == 0 {
		return nil
	}
	var probs []string
	if s.Default.Object != nil {
		for _, e := range ps.check(s.Default.Object, s, field.NewPath("default")) {
			probs = append(probs, fmt.Sprintf("%s.default: %s", path, e.ErrorBody()))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[k]
		probs = append(probs, ps.checkDefaults(&p, path+".properties."+k)...)
	}
	probs = append(probs, ps.checkDefaults(s.Items, path+".items")...)
	if s.AdditionalProperties != nil {
		probs = append(probs, ps.checkDefaults(s.AdditionalProperties.Structural, path+".additionalProperties")...)
	}
	return probs
}

// patternInsts estimates the instructions of a pattern's compiled
// program the way Go's parser bounds them (regexp/syntax's calcSize): a
// repeat costs its body times its count, so 14 bytes of [a-z]{1,1000}
// are two thousand instructions. A pattern that does not parse costs
// nothing: it is refused before anything is kept.
func patternInsts(pattern string) int64 {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	return regexpInsts(re)
}

func regexpInsts(re *syntax.Regexp) int64 {
	var size int64
	switch re.Op {
	case syntax.OpLiteral:
		size = int64(len(re.Rune))
	case syntax.OpCapture, syntax.OpStar:
		size = 2 + regexpInsts(re.Sub[0])
	case syntax.OpPlus, syntax.OpQuest:
		size = 1 + regexpInsts(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			size += regexpInsts(sub)
		}
		size += int64(len(re.Sub))
	case syntax.OpRepeat:
		sub := regexpInsts(re.Sub[0])
		switch {
		case re.Max == -1 && re.Min == 0:
			size = 2 + sub
		case re.Max == -1:
			size = 1 + int64(re.Min)*sub
		default:
			size = int64(re.Max)*sub + int64(re.Max-re.Min)
		}
	}
	return max(1, size)
}

// regexFunctions are the CEL functions whose constant regex argument the
// API server's CEL compiles once, into the rule's program
// (cel.OptOptimize for matches, the Kubernetes regex library's
// optimizations for find and findAll), so that it is kept with the
// catalog as a pattern keyword's is.
var regexFunctions = map[string]bool{"matches": true, "find": true, "findAll": true}

// ruleRegexes returns the constant regexes of a CEL rule: the string
// literal each call of a regexFunction takes as its pattern (s.matches(re),
// matches(s, re), s.find(re), s.findAll(re[, n])). A rule that does not
// parse has none: it is refused before anything is kept.
func ruleRegexes(rule string) []string {
	p, err := celparser.NewParser(celparser.Macros(celparser.AllMacros...), celparser.MaxRecursionDepth(maxWalkDepth))
	if err != nil {
		return nil
	}
	tree, errs := p.Parse(common.NewTextSource(rule))
	if errs != nil && len(errs.GetErrors()) > 0 {
		return nil
	}
	var out []string
	ast.PreOrderVisit(ast.NavigateAST(tree), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		call := e.AsCall()
		if !regexFunctions[call.FunctionName()] {
			return
		}
		args := call.Args()
		i := 0
		if !call.IsMemberFunction() {
			i = 1
		}
		if i >= len(args) || args[i].Kind() != ast.LiteralKind {
			return
		}
		if s, ok := args[i].AsLiteral().Value().(string); ok {
			out = append(out, s)
		}
	}))
	return out
}
