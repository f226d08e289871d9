package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
)

// InBandPath is where on an engine's request a router carries the hint
// message. Engines read hints in-band, on the request they serve; none
// known today opens a separate endpoint for them. The zero value is
// InBandKVHint, Dynamo's path.
type InBandPath uint8

const (
	// InBandKVHint is kv_transfer_params.kv_hint, where Dynamo's vLLM
	// handler reads the hint since Dynamo PR #13134. It is the default.
	InBandKVHint InBandPath = iota
	// InBandKVHints is a top-level kv_hints field, as vLLM PR #53423 adds
	// and SGLang RFC #36224 proposes.
	InBandKVHints
	// InBandRouterHint is kv_transfer_params.router_hint, the path of
	// Dynamo PR #11695 that kv_hint replaced. Only for engines that still
	// read it.
	InBandRouterHint
)

// inBandPaths are the paths' names, as ParseInBandPath takes them.
var inBandPaths = [...]string{
	InBandKVHint:     "kv_transfer_params.kv_hint",
	InBandKVHints:    "kv_hints",
	InBandRouterHint: "kv_transfer_params.router_hint",
}

// String returns the path as a dotted field name, e.g.
// "kv_transfer_params.kv_hint".
func (p InBandPath) String() string {
	if int(p) < len(inBandPaths) {
		return inBandPaths[p]
	}
	return fmt.Sprintf("InBandPath(%d)", uint8(p))
}

// ParseInBandPath reads a path's dotted name: "kv_transfer_params.kv_hint",
// "kv_hints" or "kv_transfer_params.router_hint".
func ParseInBandPath(s string) (InBandPath, error) {
	for p, name := range inBandPaths {
		if s == name {
			return InBandPath(p), nil
		}
	}
	return 0, fmt.Errorf("unknown in-band hint path %q: want %s, %s or %s",
		s, inBandPaths[InBandKVHint], inBandPaths[InBandKVHints], inBandPaths[InBandRouterHint])
}

// Set parses s into p, so that an InBandPath is a flag.Value.
func (p *InBandPath) Set(s string) error {
	v, err := ParseInBandPath(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalText writes the path's dotted name.
func (p InBandPath) MarshalText() ([]byte, error) {
	if int(p) >= len(inBandPaths) {
		return nil, fmt.Errorf("unknown in-band hint path %d", uint8(p))
	}
	return []byte(inBandPaths[p]), nil
}

// UnmarshalText reads a path's dotted name.
func (p *InBandPath) UnmarshalText(b []byte) error { return p.Set(string(b)) }

// fields are the path's parent object ("" for the top level) and key.
func (p InBandPath) fields() (parent, key string, err error) {
	switch p {
	case InBandKVHint:
		return kvTransferParams, "kv_hint", nil
	case InBandKVHints:
		return "", "kv_hints", nil
	case InBandRouterHint:
		return kvTransferParams, "router_hint", nil
	}
	return "", "", fmt.Errorf("unknown in-band hint path %d", uint8(p))
}

const kvTransferParams = "kv_transfer_params"

// ErrNotObject is wrapped by CarryHint's errors when the request body, its
// kv_transfer_params or the hint message is JSON but not a JSON object.
var ErrNotObject = errors.New("not a JSON object")

// CarryHint returns a copy of an OpenAI-style JSON request body with the
// hint message (the bytes a booking answered) at path, ready to forward to
// the booked worker. Every other field of the body is kept, its value byte
// for byte and the top-level fields in their order; a missing field is
// added after the last one. Transfer parameters the body already carries
// under kv_transfer_params (a prefill/decode handshake, say) are kept
// beside the hint, and a value already at path is replaced. A
// kv_transfer_params of null counts as absent.
//
// It is an error, naming the field, when the body is not a JSON object,
// when its kv_transfer_params is neither an object nor null, and when the
// message is not a JSON object; the body is never changed in place.
//
// Where fields appear twice in one object, the last one is the one JSON
// decoders keep, so the last is the one CarryHint reads and replaces.
func CarryHint(body, message []byte, path InBandPath) ([]byte, error) {
	parent, key, err := path.fields()
	if err != nil {
		return nil, err
	}
	msg := trimSpace(message)
	if len(msg) == 0 {
		return nil, errors.New("hint message is empty")
	}
	if !json.Valid(msg) {
		return nil, fmt.Errorf("hint message: %w", syntaxError(msg))
	}
	if msg[0] != '{' {
		return nil, fmt.Errorf("hint message: %w, got %s", ErrNotObject, kindOf(msg[0]))
	}
	// Validating with encoding/json first lets the scan below assume
	// well-formed JSON: it only finds where the members are.
	if !json.Valid(body) {
		return nil, fmt.Errorf("request body: %w", syntaxError(body))
	}
	start := skipSpace(body, 0)
	if body[start] != '{' {
		return nil, fmt.Errorf("request body: %w, got %s", ErrNotObject, kindOf(body[start]))
	}
	if parent == "" {
		return spliceMember(body, scanObject(body, start, key), key, "", msg, ""), nil
	}
	top := scanObject(body, start, parent)
	if top.valStart < 0 {
		return spliceMember(body, top, parent, `{"`+key+`":`, msg, "}"), nil
	}
	switch v := body[top.valStart]; {
	case v == 'n':
		// null: as if absent, in the place it holds.
		return splice(body, top.valStart, top.valEnd, `{"`+key+`":`, msg, "}"), nil
	case v != '{':
		return nil, fmt.Errorf("request body: %s: %w, got %s", parent, ErrNotObject, kindOf(v))
	}
	return spliceMember(body, scanObject(body, top.valStart, key), key, "", msg, ""), nil
}

// spliceMember replaces the value of the member the scan found with head,
// msg and tail, or adds the member "key": head msg tail at the end of the
// object when it has none.
func spliceMember(body []byte, o objectScan, key, head string, msg []byte, tail string) []byte {
	if o.valStart >= 0 {
		return splice(body, o.valStart, o.valEnd, head, msg, tail)
	}
	sep := `,"`
	if o.empty {
		sep = `"`
	}
	return splice(body, o.insert, o.insert, sep+key+`":`+head, msg, tail)
}

// splice returns a new buffer holding body with body[from:to] replaced by
// head, msg and tail, in one allocation.
func splice(body []byte, from, to int, head string, msg []byte, tail string) []byte {
	out := make([]byte, 0, len(body)-(to-from)+len(head)+len(msg)+len(tail))
	out = append(out, body[:from]...)
	out = append(out, head...)
	out = append(out, msg...)
	out = append(out, tail...)
	return append(out, body[to:]...)
}

// objectScan is what scanObject found in one JSON object.
type objectScan struct {
	// valStart and valEnd delimit the value of the last member with the
	// key asked for; valStart is -1 when there is none.
	valStart, valEnd int
	// insert is where a new member goes: just after the last member's
	// value, or just after the opening brace of an empty object.
	insert int
	// empty is set for an object without members.
	empty bool
}

// scanObject scans the object that opens at b[start] in well-formed JSON
// for the last member named key.
func scanObject(b []byte, start int, key string) objectScan {
	o := objectScan{valStart: -1, insert: start + 1, empty: true}
	i := skipSpace(b, start+1)
	if b[i] == '}' {
		return o
	}
	o.empty = false
	for {
		// A member: "key" : value, then , or }.
		ks := i
		i = skipString(b, i)
		match := keyIs(b[ks:i], key)
		i = skipSpace(b, i)
		i = skipSpace(b, i+1) // the colon
		vs := i
		i = skipValue(b, i)
		if match {
			o.valStart, o.valEnd = vs, i
		}
		o.insert = i
		i = skipSpace(b, i)
		if b[i] == '}' {
			return o
		}
		i = skipSpace(b, i+1) // the comma
	}
}

// keyIs reports whether the quoted JSON string q decodes to key.
func keyIs(q []byte, key string) bool {
	raw := q[1 : len(q)-1]
	for _, c := range raw {
		if c == '\\' {
			// An escaped name ("kv\u005fhints") is rare: decode it.
			var s string
			return json.Unmarshal(q, &s) == nil && s == key
		}
	}
	return string(raw) == key
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && isSpace(b[i]) {
		i++
	}
	for j > i && isSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}

// skipString returns the index just past the string that opens at b[i].
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	// A number, true, false or null.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// kindOf names the kind of JSON value that starts with c.
func kindOf(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// syntaxError says why b is not valid JSON, for an error.
func syntaxError(b []byte) error {
	if len(trimSpace(b)) == 0 {
		return errors.New("empty, want a JSON object")
	}
	var v json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return errors.New("invalid JSON")
}
