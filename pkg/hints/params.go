package hints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
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

// DecodeParams decodes a flat parameters object into dst, a pointer to a
// struct whose fields carry json tags. It is strict: a key that names no
// field, or a value of the wrong JSON type, is a *ParamError naming the key
// and listing what is accepted. Fields absent from params keep their values,
// so callers fill dst with defaults first.
func DecodeParams(params Params, dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("DecodeParams: dst must be a pointer to a struct, not %T", dst)
	}
	fields := paramFields(rv.Elem().Type())

	trimmed := bytes.TrimSpace(params)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	if trimmed[0] != '{' {
		return &ParamError{Message: "must be a mapping of parameter names to values"}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return &ParamError{Message: "must be a mapping of parameter names to values: " + err.Error()}
	}
	for _, key := range sortedKeys(raw) {
		f, ok := fields[key]
		if !ok {
			if len(fields) == 0 {
				return &ParamError{Key: key, Message: "unknown parameter; this type takes no parameters"}
			}
			return &ParamError{Key: key, Message: "unknown parameter; known: " + strings.Join(sortedKeys(fields), ", ")}
		}
		val := raw[key]
		if bytes.Equal(bytes.TrimSpace(val), []byte("null")) {
			return &ParamError{Key: key, Message: "must not be null; leave the key out for the default"}
		}
		field := rv.Elem().FieldByIndex(f.index)
		if err := json.Unmarshal(val, field.Addr().Interface()); err != nil {
			return &ParamError{Key: key, Message: fmt.Sprintf("%s is not %s", shorten(val), describeKind(f.typ))}
		}
	}
	return nil
}

type paramField struct {
	index []int
	typ   reflect.Type
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
		out[name] = paramField{index: sf.Index, typ: sf.Type}
	}
	return out
}

func describeKind(t reflect.Type) string {
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
	case reflect.Slice:
		return "a list"
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
