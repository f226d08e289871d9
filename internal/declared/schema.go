package declared

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
)

// paramSchema is one type's parameter schema, checked and compiled once,
// when the declaration is loaded.
type paramSchema struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
	// rules checks the x-kubernetes-validations; nil when there are none.
	rules *schemacel.Validator
	// patterns checks the patterns, which validator does not hold (see
	// patternSet); shared by the declaration's types.
	patterns patternSet
}

// wrapper is the synthetic CRD's property that holds a type's parameter
// schema: a CRD's root schema has rules of its own (metadata, apiVersion,
// kind) that a parameters object has nothing to do with.
const wrapper = "params"

// schemaPrefix is where the API server's CRD validation reports problems of
// the wrapped schema.
var schemaPrefix = field.NewPath("spec", "validation", "openAPIV3Schema").Child("properties").Key(wrapper).String()

// compileSchema checks a parameter schema the way the API server checks a
// CRD's (it must be structural, its defaults must be pruned and valid, its
// CEL rules must compile within the cost limits), and refuses what would
// let an unknown key through. Problems are reported at path, the place of
// the schema in the declaration. Its patterns are compiled into ps.
func compileSchema(in *apiextensionsv1.JSONSchemaProps, path string, ps patternSet) (*paramSchema, []string) {
	if in == nil {
		in = &apiextensionsv1.JSONSchemaProps{Type: "object"}
	}
	var probs []string
	if in.Type != "object" {
		probs = append(probs, fmt.Sprintf("%s.type: must be object (parameters are a mapping), not %q", path, in.Type))
	}
	probs = append(probs, strictness(in, path)...)
	plain, msgs := ps.compile(in, path)
	probs = append(probs, msgs...)
	if len(probs) > 0 {
		return nil, probs
	}

	// The API server's code sees the schema without its patterns (plain);
	// the structural schema keeps them, for ps to check.
	var props, plainProps apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(in, &props, nil); err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(plain, &plainProps, nil); err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	for _, e := range crdvalidation.ValidateCustomResourceDefinition(context.Background(), syntheticCRD(plainProps)) {
		probs = append(probs, relocate(e, path))
	}
	if len(probs) > 0 {
		return nil, probs
	}
	s, err := structuralschema.NewStructural(&props)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	if probs := ps.checkDefaults(s, path); len(probs) > 0 {
		return nil, probs
	}
	v, _, err := validation.NewSchemaValidator(&plainProps)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	return &paramSchema{structural: s, validator: v, rules: schemacel.NewValidator(s, false, celconfig.PerCallLimit), patterns: ps}, nil
}

// strictness refuses x-kubernetes-preserve-unknown-fields anywhere: the
// router's parameter structs refuse unknown keys (serde's
// deny_unknown_fields), so a declaration that let them through would
// accept what the router refuses at start-up. A map-valued parameter
// (additionalProperties) is a schema of its own and stays allowed.
func strictness(s *apiextensionsv1.JSONSchemaProps, path string) []string {
	var probs []string
	if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
		probs = append(probs, fmt.Sprintf("%s.x-kubernetes-preserve-unknown-fields: not allowed: a declared schema must refuse unknown keys, as the router does", path))
	}
	if s.XEmbeddedResource {
		probs = append(probs, fmt.Sprintf("%s.x-kubernetes-embedded-resource: not allowed in parameters", path))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[k]
		probs = append(probs, strictness(&p, path+".properties."+k)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		probs = append(probs, strictness(s.Items.Schema, path+".items")...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		probs = append(probs, strictness(s.AdditionalProperties.Schema, path+".additionalProperties")...)
	}
	return probs
}

// syntheticCRD wraps a parameter schema in a CRD, so that the API server's
// own CRD validation checks it.
func syntheticCRD(params apiextensions.JSONSchemaProps) *apiextensions.CustomResourceDefinition {
	preserve := false
	return &apiextensions.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "parameters.declared.hints.kvrouter.io"},
		Spec: apiextensions.CustomResourceDefinitionSpec{
			Group: "declared.hints.kvrouter.io",
			Names: apiextensions.CustomResourceDefinitionNames{
				Plural: "parameters", Singular: "parameters", Kind: "Parameters", ListKind: "ParametersList",
			},
			Scope:    apiextensions.NamespaceScoped,
			Versions: []apiextensions.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true}},
			Validation: &apiextensions.CustomResourceValidation{OpenAPIV3Schema: &apiextensions.JSONSchemaProps{
				Type:       "object",
				Properties: map[string]apiextensions.JSONSchemaProps{wrapper: params},
			}},
			PreserveUnknownFields: &preserve,
			Conversion:            &apiextensions.CustomResourceConversion{Strategy: apiextensions.NoneConverter},
		},
		Status: apiextensions.CustomResourceDefinitionStatus{StoredVersions: []string{"v1"}},
	}
}

// relocate rewrites a CRD validation error about the wrapped schema into
// one about the declaration's schema at path.
func relocate(e *field.Error, path string) string {
	f := e.Field
	if rest, ok := strings.CutPrefix(f, schemaPrefix); ok {
		f = path + crdPath(rest)
	}
	msg := e.ErrorBody()
	if e.Detail != "" {
		// The value of a rule or a schema node is a struct dump; the
		// detail says what is wrong with it.
		msg = e.Type.String() + ": " + strings.TrimPrefix(e.Detail, " in body ")
	}
	return fmt.Sprintf("%s: %s", f, msg)
}

// crdPath turns the API server's properties[name] notation into the
// declaration's .properties.name.
func crdPath(p string) string {
	var b strings.Builder
	for len(p) > 0 {
		i := strings.Index(p, "[")
		if i < 0 {
			b.WriteString(p)
			break
		}
		j := strings.Index(p[i:], "]")
		if j < 0 {
			b.WriteString(p)
			break
		}
		b.WriteString(p[:i])
		inner := p[i+1 : i+j]
		if _, err := strconv.Atoi(inner); err == nil {
			b.WriteString("[" + inner + "]")
		} else {
			b.WriteString("." + inner)
		}
		p = p[i+j+1:]
	}
	return b.String()
}

// commitProgram is a compiled commitsKVCopies expression.
type commitProgram struct {
	program cel.Program
	source  string
}

// commitsVar is the variable a commitsKVCopies expression reads.
const commitsVar = "params"

// compileCommits compiles a commitsKVCopies expression over params, once,
// in the API server's CEL environment (the libraries CRD rules may call),
// with params typed by the parameter schema. Its estimated cost must be
// within the per-call limit of one CRD rule, and its evaluation stops at
// that limit.
func compileCommits(s *paramSchema, expr, path string) (*commitProgram, []string) {
	declType := model.SchemaDeclType(s.structural, false)
	if declType == nil {
		return nil, []string{fmt.Sprintf("%s: the parameter schema has no CEL type", path)}
	}
	// A type name of its own: one equal to the variable would make
	// params.x a qualified type name rather than a field.
	declType = declType.MaybeAssignTypeName("kvhint.declared.Parameters")
	envSet, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable(commitsVar, declType.CelType())},
		DeclTypes:         []*apiservercel.DeclType{declType},
	})
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	env, err := envSet.Env(environment.NewExpressions)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, []string{fmt.Sprintf("%s: does not compile: %v", path, iss.Err())}
	}
	if ast.OutputType() != cel.BoolType {
		return nil, []string{fmt.Sprintf("%s: must be a boolean expression, not one of type %s", path, ast.OutputType())}
	}
	cost, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: sizeEstimator{root: declType}})
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: estimating its cost: %v", path, err)}
	}
	if cost.Max > celconfig.PerCallLimit {
		return nil, []string{fmt.Sprintf("%s: the expression's estimated cost %d exceeds the limit of %d for one evaluation; bound the lists and maps it reads (maxItems, maxProperties)", path, cost.Max, celconfig.PerCallLimit)}
	}
	prog, err := env.Program(ast, cel.CostLimit(celconfig.PerCallLimit), cel.InterruptCheckFrequency(celconfig.CheckFrequency))
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	return &commitProgram{program: prog, source: expr}, nil
}

// eval runs the expression on parameters that passed the schema.
func (c *commitProgram) eval(ctx context.Context, s *paramSchema, params map[string]any) (bool, error) {
	out, _, err := c.program.ContextEval(ctx, map[string]any{commitsVar: schemacel.UnstructuredToVal(params, s.structural)})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("returned %v, not a boolean", out.Value())
	}
	return b, nil
}

// sizeEstimator bounds the size of what an expression reads by the
// schema's maxItems, maxProperties and maxLength, as the API server does
// for CRD rules.
type sizeEstimator struct{ root *apiservercel.DeclType }

func (e sizeEstimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if len(path) == 0 {
		return nil
	}
	cur := e.root
	for _, name := range path[1:] {
		switch name {
		case "@items", "@values":
			cur = cur.ElemType
		case "@keys":
			cur = cur.KeyType
		default:
			f, ok := cur.Fields[name]
			if !ok {
				return nil
			}
			cur = f.Type
		}
		if cur == nil {
			return nil
		}
	}
	return &checker.SizeEstimate{Min: 0, Max: uint64(cur.MaxElements)}
}

func (sizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}
