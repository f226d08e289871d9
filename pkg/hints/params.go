package hints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// ParamError is a parameter that a provider refused. Key is empty when the
// parameters as a whole are wrong (not a mapping, say).
type ParamError struct {
	Key     string
	Message string
}

func (e *ParamError) Error() string {
	if e.Key == "" {
		return "parameters: " + e.Message
	}
	return fmt.Sprintf("parameter %q: %s", e.Key, e.Message)
}

// ParamErrorf builds a *ParamError for key.
func ParamErrorf(key, format string, args ...any) error {
	return &ParamError{Key: key, Message: fmt.Sprintf(format, args...)}
}

// DecodeParams decodes a parameters object into dst, a pointer to a struct
// whose fields carry json tags. It is strict: a key that names no field, or
// a value of the wrong JSON type, is a *ParamError naming the key and
// listing what is accepted. Fields absent from params keep their values,
// so callers fill dst with defaults first.
//
// A pointer field stays nil unless its key is given, which lets a policy
// tell a value that was set from one that was left out. A field whose type
// is a struct, or a pointer to one, takes a nested mapping, decoded by the
// same rules: an unknown key there is refused with its full path, such as
// adaptive.load_scale, as the error's Key. A null value is refused, except
// for a pointer field tagged params:"option", which null leaves unset, as
// Dynamo's serde reads null for an Option. An integer field refuses a
// number written as a float, 1.0 included, in the words of Dynamo's serde.
func DecodeParams(params Params, dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("DecodeParams: dst must be a pointer to a struct, not %T", dst)
	}
	trimmed := bytes.TrimSpace(params)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	return decodeObject(trimmed, rv.Elem(), "")
}

// decodeObject decodes the JSON object raw into the struct v. prefix is the
// key path of v followed by a dot, or "" at the top level.
func decodeObject(raw []byte, v reflect.Value, prefix string) error {
	fields := paramFields(v.Type())
	at := strings.TrimSuffix(prefix, ".")
	if raw[0] != '{' {
		if at == "" {
			return &ParamError{Message: "must be a mapping of parameter names to values"}
		}
		return &ParamError{Key: at, Message: fmt.Sprintf("%s is not a mapping", shorten(raw))}
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		if at == "" {
			return &ParamError{Message: "must be a mapping of parameter names to values: " + err.Error()}
		}
		return &ParamError{Key: at, Message: "is not a mapping: " + err.Error()}
	}
	for _, key := range sortedKeys(members) {
		path := prefix + key
		f, ok := fields[key]
		if !ok {
			switch {
			case len(fields) == 0 && at == "":
				return &ParamError{Key: path, Message: "unknown parameter; this type takes no parameters"}
			case len(fields) == 0:
				return &ParamError{Key: path, Message: "unknown parameter; " + at + " takes no keys"}
			}
			return &ParamError{Key: path, Message: "unknown parameter; known: " + strings.Join(sortedKeys(fields), ", ")}
		}
		raw := bytes.TrimSpace(members[key])
		if f.nullUnset && bytes.Equal(raw, []byte("null")) {
			// An Option written as null: unset, the default applies.
			v.FieldByIndex(f.index).SetZero()
			continue
		}
		if err := decodeValue(raw, v.FieldByIndex(f.index), path); err != nil {
			return err
		}
	}
	return nil
}

// decodeValue decodes one member's value into the field v, whose key path
// is path. A pointer is allocated only once the value is known to be good,
// so a refused value leaves the field as it was.
func decodeValue(raw []byte, v reflect.Value, path string) error {
	t := v.Type()
	if bytes.Equal(raw, []byte("null")) {
		return &ParamError{Key: path, Message: "must not be null; leave the key out for the default"}
	}
	if t.Kind() == reflect.Pointer {
		elem := reflect.New(t.Elem())
		if !v.IsNil() {
			elem.Elem().Set(v.Elem())
		}
		if err := decodeValue(raw, elem.Elem(), path); err != nil {
			return err
		}
		v.Set(elem)
		return nil
	}
	if t.Kind() == reflect.Struct {
		return decodeObject(raw, v, path+".")
	}
	if msg, ok := floatForInteger(raw, t); ok {
		return &ParamError{Key: path, Message: msg}
	}
	target := reflect.New(t)
	target.Elem().Set(v)
	if err := json.Unmarshal(raw, target.Interface()); err != nil {
		if msg, ok := outOfRange(raw, t); ok {
			return &ParamError{Key: path, Message: msg}
		}
		return &ParamError{Key: path, Message: fmt.Sprintf("%s is not %s", shorten(raw), describeKind(t))}
	}
	v.Set(target.Elem())
	return nil
}

// outOfRange words the refusal of an integer written in full that the
// integer type t cannot hold: the value as written (not rounded to a
// float) and the bound it passes. A negative value of an unsigned type is
// left to the caller: it is not a non-negative integer at all.
func outOfRange(raw []byte, t reflect.Type) (string, bool) {
	if !integerLiteral(raw) {
		return "", false
	}
	s := string(raw)
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		if s[0] == '-' {
			return fmt.Sprintf("%s is out of range: at least %d", shorten(raw), int64(-1)<<(bits-1)), true
		}
		return fmt.Sprintf("%s is out of range: at most %d", shorten(raw), int64(uint64(1)<<(bits-1)-1)), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if s[0] == '-' {
			return "", false
		}
		return fmt.Sprintf("%s is out of range: at most %d", shorten(raw), uint64(math.MaxUint64)>>(64-t.Bits())), true
	}
	return "", false
}

// floatForInteger words the refusal of a number written as a float (1.0,
// 1e3) for an integer field as Dynamo's serde does: "invalid type:
// floating point `1`, expected u64". An integer is never read from a
// float, even a whole one: the router would refuse it.
func floatForInteger(raw []byte, t reflect.Type) (string, bool) {
	var rust string
	switch t.Kind() {
	case reflect.Uint, reflect.Uint64, reflect.Uintptr:
		rust = "u64"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		rust = fmt.Sprintf("u%d", t.Bits())
	case reflect.Int, reflect.Int64, reflect.Int8, reflect.Int16, reflect.Int32:
		rust = fmt.Sprintf("i%d", t.Bits())
	default:
		return "", false
	}
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) || !bytes.ContainsAny(raw, ".eE") {
		return "", false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return "", false
	}
	text := strconv.FormatFloat(f, 'f', -1, 64) // as Rust writes it: 1.0 as 1
	if bytes.ContainsAny(raw, "eE") {
		text = string(raw) // 1e40 as written, not forty digits
	}
	return fmt.Sprintf("invalid type: floating point `%s`, expected %s", text, rust), true
}

// integerLiteral reports whether raw is a JSON number written as an
// integer: an optional minus and digits, no fraction or exponent.
func integerLiteral(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

type paramField struct {
	index []int
	typ   reflect.Type
	// nullUnset: the field is an Option, which null leaves unset.
	nullUnset bool
}

func paramFields(t reflect.Type) map[string]paramField {
	out := map[string]paramField{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out[name] = paramField{index: sf.Index, typ: sf.Type, nullUnset: sf.Type.Kind() == reflect.Pointer && sf.Tag.Get("params") == "option"}
	}
	return out
}

// describeKind names what a value of type t looks like in the parameters;
// a pointer is described by what it points to.
func describeKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	default:
		return "a " + t.Kind().String()
	}
}

func shorten(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

// IntInRange checks lo <= v <= hi for parameter key.
func IntInRange(key string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return ParamErrorf(key, "%d is out of range %d..%d", v, lo, hi)
	}
	return nil
}

// FloatInRange checks that v is finite and lo <= v <= hi for parameter key.
func FloatInRange(key string, v, lo, hi float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ParamErrorf(key, "%v is not a finite number", v)
	}
	if v < lo || v > hi {
		return ParamErrorf(key, "%g is out of range %g..%g", v, lo, hi)
	}
	return nil
}

// FloatAtLeast checks that v is finite and v >= lo for parameter key: the
// bound of a parameter with no upper limit, such as a weight that must be
// non-negative (lo 0).
func FloatAtLeast(key string, v, lo float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ParamErrorf(key, "%v is not a finite number", v)
	}
	if v < lo {
		return ParamErrorf(key, "%g is below the minimum %g", v, lo)
	}
	return nil
}
