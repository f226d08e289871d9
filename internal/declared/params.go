package declared

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// root is the field path parameters are validated under; it is cut off
// the keys that problems name.
var root = field.NewPath("parameters")

// check validates a parameters object against the schema, as the API
// server validates a custom resource: unknown keys (pruning), then the
// values' types, then defaults are applied and the rest of the schema and
// its CEL rules are checked. It returns the parameters with defaults
// applied, or the first problem as a *hints.ParamError worded as
// hints.DecodeParams words it: problems of structure first (unknown keys,
// nulls, wrong types, by key), then bounds and other schema rules (by
// key), then CEL rules (in rule order), which is the order in which a
// linked provider decodes and then checks.
func (s *paramSchema) check(ctx context.Context, raw hints.Params) (map[string]any, error) {
	obj, wide, err := decodeParams(raw)
	if err != nil {
		return nil, err
	}

	var structural []*hints.ParamError
	probe := runtime.DeepCopyJSONValue(obj).(map[string]any)
	unknown := pruning.PruneWithOptions(probe, s.structural, false, schema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, key := range unknown {
		structural = append(structural, &hints.ParamError{Key: key, Message: unknownMessage(s.structural, key)})
	}
	structural = append(structural, nulls(obj, s.structural, "")...)
	structural = append(structural, missing(obj, s.structural, "")...)
	// Types are checked on the known keys, so that the first key in order
	// is reported whichever way it is wrong, as DecodeParams reports it.
	// A negative value of an unsigned integer is a wrong type too: Go's
	// and Rust's decoders refuse it before any bound is checked.
	for _, e := range validation.ValidateCustomResource(root, probe, s.validator) {
		if e.Type == field.ErrorTypeTypeInvalid || negativeUnsigned(s.structural, e) {
			structural = append(structural, typeProblem(s.structural, obj, wide, e))
		}
	}
	if first := firstByKey(structural); first != nil {
		return nil, first
	}

	unsetNulls(obj, s.structural)
	defaulting.Default(obj, s.structural)
	var bounds []*hints.ParamError
	for _, e := range validation.ValidateCustomResource(root, obj, s.validator) {
		if e.Type != field.ErrorTypeRequired { // missing reported them
			bounds = append(bounds, boundProblem(s.structural, e))
		}
	}
	for _, e := range s.patterns.check(obj, s.structural, root) {
		bounds = append(bounds, boundProblem(s.structural, e))
	}
	if first := firstByKey(bounds); first != nil {
		return nil, first
	}
	if s.rules != nil {
		errs, _ := s.rules.Validate(ctx, root, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		if len(errs) > 0 {
			return nil, &hints.ParamError{Key: keyOf(errs[0].Field), Message: errs[0].Detail}
		}
	}
	return obj, nil
}

// decodeParams reads a parameters object as unstructured JSON, the way the
// API server reads a custom resource: integers as int64, other numbers as
// float64. No parameters, or null, is an empty mapping. wide maps the
// dotted key of each integer written wider than an int64 (read as a
// float64) to the integer as written, for messages.
func decodeParams(raw hints.Params) (obj map[string]any, wide map[string]string, err error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return map[string]any{}, nil, nil
	}
	if trimmed[0] != '{' {
		return nil, nil, &hints.ParamError{Message: "must be a mapping of parameter names to values"}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, nil, &hints.ParamError{Message: "must be a mapping of parameter names to values: " + err.Error()}
	}
	wide = map[string]string{}
	obj, _ = numbers(v, "", wide).(map[string]any)
	return obj, wide, nil
}

// numbers replaces json.Number values by int64, when the literal is an
// integer that fits, or float64; an integer that does not fit is recorded
// in wide under its dotted key.
func numbers(v any, key string, wide map[string]string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			sub := k
			if key != "" {
				sub = key + "." + k
			}
			x[k] = numbers(e, sub, wide)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e, key, wide)
		}
	case json.Number:
		if !strings.ContainsAny(string(x), ".eE") {
			if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				return i
			}
			wide[key] = string(x)
		}
		f, _ := strconv.ParseFloat(string(x), 64)
		return f
	}
	return v
}

// unsetNulls removes the keys whose value is null where the schema says
// nullable: null there means "not set" (a Rust Option, as DecodeParams
// reads a field tagged params:"option"), so the default applies and the
// effective parameters do not name the key.
func unsetNulls(v any, s *schema.Structural) {
	m, ok := v.(map[string]any)
	if !ok || s == nil {
		return
	}
	for k, e := range m {
		sub := propertySchema(s, k)
		if sub == nil {
			continue
		}
		if e == nil && sub.Nullable {
			delete(m, k)
			continue
		}
		unsetNulls(e, sub)
	}
}

// nulls refuses null values where the schema does not say nullable, as
// DecodeParams refuses them everywhere.
func nulls(v any, s *schema.Structural, prefix string) []*hints.ParamError {
	m, ok := v.(map[string]any)
	if !ok || s == nil {
		return nil
	}
	var out []*hints.ParamError
	for k, e := range m {
		sub := propertySchema(s, k)
		if sub == nil {
			continue // unknown: pruning reports it
		}
		if e == nil && !sub.Nullable {
			out = append(out, &hints.ParamError{Key: prefix + k, Message: "must not be null; leave the key out for the default"})
			continue
		}
		out = append(out, nulls(e, sub, prefix+k+".")...)
	}
	return out
}

// missing reports the required keys that are not given.
func missing(v any, s *schema.Structural, prefix string) []*hints.ParamError {
	m, ok := v.(map[string]any)
	if !ok || s == nil {
		return nil
	}
	var out []*hints.ParamError
	if s.ValueValidation != nil {
		for _, k := range s.ValueValidation.Required {
			if _, ok := m[k]; !ok {
				out = append(out, &hints.ParamError{Key: prefix + k, Message: "is required: the type has no default for it"})
			}
		}
	}
	for k, e := range m {
		out = append(out, missing(e, propertySchema(s, k), prefix+k+".")...)
	}
	return out
}

// propertySchema is the schema of key in an object schema: its property,
// or its additionalProperties schema; nil when the key is unknown.
func propertySchema(s *schema.Structural, key string) *schema.Structural {
	if p, ok := s.Properties[key]; ok {
		return &p
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
		return s.AdditionalProperties.Structural
	}
	return nil
}

// at returns the schema at a dotted key path, or nil.
func at(s *schema.Structural, key string) *schema.Structural {
	if key == "" {
		return s
	}
	for _, part := range strings.Split(key, ".") {
		name, _, _ := strings.Cut(part, "[")
		if s = propertySchema(s, name); s == nil {
			return nil
		}
		if strings.Contains(part, "[") && s.Items != nil {
			s = s.Items
		}
	}
	return s
}

// unknownMessage words an unknown key as DecodeParams does.
func unknownMessage(s *schema.Structural, key string) string {
	parent := ""
	if i := strings.LastIndex(key, "."); i >= 0 {
		parent = key[:i]
	}
	known := slices.Sorted(maps.Keys(at(s, parent).Properties))
	switch {
	case len(known) == 0 && parent == "":
		return "unknown parameter; this type takes no parameters"
	case len(known) == 0:
		return "unknown parameter; " + parent + " takes no keys"
	}
	return "unknown parameter; known: " + strings.Join(known, ", ")
}

// typeProblem words a value of the wrong type as DecodeParams does:
// "\"x\" is not a number".
func typeProblem(s *schema.Structural, obj map[string]any, wide map[string]string, e *field.Error) *hints.ParamError {
	key := keyOf(e.Field)
	node := at(s, key)
	v, ok := valueAt(obj, key)
	if node == nil || !ok {
		return &hints.ParamError{Key: key, Message: e.ErrorBody()}
	}
	if text, ok := wide[key]; ok {
		if msg, ok := wideMessage(node, text); ok {
			return &hints.ParamError{Key: key, Message: msg}
		}
		v = json.Number(text)
	}
	if msg, ok := floatForInteger(node, v); ok {
		return &hints.ParamError{Key: key, Message: msg}
	}
	return &hints.ParamError{Key: key, Message: fmt.Sprintf("%s is not %s", shorten(v), describe(node))}
}

// floatForInteger words a number with a fraction given for an integer in
// serde's words, as DecodeParams does (Dynamo's parameter structs are
// Rust integers): u64 for a declaration's unsigned integer, else i64.
func floatForInteger(s *schema.Structural, v any) (string, bool) {
	if s.Type != "integer" {
		return "", false
	}
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case json.Number:
		x, err := n.Float64()
		if err != nil {
			return "", false
		}
		f = x
	default:
		return "", false
	}
	if f == math.Trunc(f) {
		return "", false
	}
	rust := "i64"
	if unsigned(s) {
		rust = "u64"
	}
	return fmt.Sprintf("invalid type: floating point `%s`, expected %s", strconv.FormatFloat(f, 'f', -1, 64), rust), true
}

// wideMessage words an integer written wider than an int64, as written,
// for an integer schema: out of its bounds when it has both, else out of
// what the API server's integers (int64) hold, or an unsigned one's
// (uint64) when the value passes even that.
func wideMessage(s *schema.Structural, text string) (string, bool) {
	if s.Type != "integer" {
		return "", false
	}
	lit := shorten(json.Number(text))
	if v := s.ValueValidation; v != nil && v.Minimum != nil && v.Maximum != nil && !v.ExclusiveMinimum && !v.ExclusiveMaximum &&
		*v.Minimum == math.Trunc(*v.Minimum) && *v.Maximum == math.Trunc(*v.Maximum) {
		return fmt.Sprintf("%s is out of range %s..%s", lit, strconv.FormatFloat(*v.Minimum, 'f', -1, 64), strconv.FormatFloat(*v.Maximum, 'f', -1, 64)), true
	}
	switch {
	case strings.HasPrefix(text, "-") && unsigned(s):
		return "", false
	case strings.HasPrefix(text, "-"):
		return fmt.Sprintf("%s is out of range: at least %d", lit, int64(math.MinInt64)), true
	}
	if _, err := strconv.ParseUint(text, 10, 64); err != nil && unsigned(s) {
		return fmt.Sprintf("%s is out of range: at most %d", lit, uint64(math.MaxUint64)), true
	}
	return fmt.Sprintf("%s is out of range: at most %d", lit, int64(math.MaxInt64)), true
}

// valueAt returns the value at a dotted key path of mappings.
func valueAt(obj map[string]any, key string) (any, bool) {
	var cur any = obj
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// describe names what a value of a schema looks like, in DecodeParams's
// words. An integer with a minimum of 0 and no maximum is how a
// declaration writes an unsigned integer (Rust's u64, Go's uint64).
func describe(s *schema.Structural) string {
	switch s.Type {
	case "integer":
		if unsigned(s) {
			return "a non-negative integer"
		}
		return "an integer"
	case "number":
		return "a number"
	case "boolean":
		return "a boolean"
	case "string":
		return "a string"
	case "array":
		return "a list"
	case "object":
		return "a mapping"
	}
	return "a " + s.Type
}

// negativeUnsigned reports whether e refuses a negative value of an
// unsigned integer.
func negativeUnsigned(s *schema.Structural, e *field.Error) bool {
	node := at(s, keyOf(e.Field))
	v, ok := e.BadValue.(int64)
	return node != nil && unsigned(node) && ok && v < 0
}

func unsigned(s *schema.Structural) bool {
	v := s.ValueValidation
	return s.Type == "integer" && v != nil && v.Minimum != nil && *v.Minimum == 0 && !v.ExclusiveMinimum && v.Maximum == nil
}

// boundProblem words a value the schema refuses once its type is right.
// Bounds are worded as hints.IntInRange, hints.FloatInRange and
// hints.FloatAtLeast word them; other rules (enum, pattern, lengths) keep
// the API server's words.
func boundProblem(s *schema.Structural, e *field.Error) *hints.ParamError {
	key := keyOf(e.Field)
	node := at(s, key)
	if msg, ok := boundMessage(node, e.BadValue); ok {
		return &hints.ParamError{Key: key, Message: msg}
	}
	return &hints.ParamError{Key: key, Message: e.ErrorBody()}
}

func boundMessage(s *schema.Structural, value any) (string, bool) {
	if s == nil || s.ValueValidation == nil {
		return "", false
	}
	v := s.ValueValidation
	var f float64
	isInt := false
	switch x := value.(type) {
	case int64:
		f, isInt = float64(x), true
	case float64:
		f = x
	default:
		return "", false
	}
	below := v.Minimum != nil && (f < *v.Minimum || v.ExclusiveMinimum && f == *v.Minimum)
	above := v.Maximum != nil && (f > *v.Maximum || v.ExclusiveMaximum && f == *v.Maximum)
	if !below && !above {
		return "", false
	}
	num := func(x float64) string {
		if isInt && x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10)
		}
		return fmt.Sprintf("%g", x)
	}
	switch {
	case unsigned(s):
		return fmt.Sprintf("%s is not a non-negative integer", num(f)), true
	case v.Minimum != nil && v.Maximum != nil && !v.ExclusiveMinimum && !v.ExclusiveMaximum:
		return fmt.Sprintf("%s is out of range %s..%s", num(f), num(*v.Minimum), num(*v.Maximum)), true
	case below && v.ExclusiveMinimum:
		return fmt.Sprintf("%s is out of range: it must be above %s", num(f), num(*v.Minimum)), true
	case below:
		return fmt.Sprintf("%s is below the minimum %s", num(f), num(*v.Minimum)), true
	case v.ExclusiveMaximum:
		return fmt.Sprintf("%s is out of range: it must be below %s", num(f), num(*v.Maximum)), true
	}
	return fmt.Sprintf("%s is above the maximum %s", num(f), num(*v.Maximum)), true
}

// keyOf turns a field path under root into the parameter key it names.
func keyOf(path string) string {
	key := strings.TrimPrefix(path, root.String())
	return strings.TrimPrefix(key, ".")
}

// firstByKey returns the problem of the first key in sorted order, as
// DecodeParams reports the first key it refuses; nil for none.
func firstByKey(ps []*hints.ParamError) *hints.ParamError {
	if len(ps) == 0 {
		return nil
	}
	return slices.MinFunc(ps, func(a, b *hints.ParamError) int { return strings.Compare(a.Key, b.Key) })
}

// shorten renders a value as JSON, cut to 40 characters, as DecodeParams
// quotes what it refuses.
func shorten(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}
