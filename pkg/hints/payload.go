package hints

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// MaxPayloadBytes is the default cap on one action's payload, the one
// Validate and CheckAction apply: a larger payload is malformed. A
// dispatcher may allow more with ValidateWithin and CheckActionWithin, so
// that a payload built from a booking it accepted always fits (pkg/dispatch
// derives its cap from its booking limit: a kv.fetch of a long prompt's
// copy is as large as the copy).
const MaxPayloadBytes = 64 << 10

// Payload is an action's engine-format JSON object.
//
// Payloads written with an ObjectWriter are well-formed by construction, so
// the dispatcher does not scan them again on the booking path; RawPayload
// wraps bytes from anywhere else, which are checked before they reach a
// worker. One malformed payload would otherwise corrupt the whole hint.
type Payload struct {
	raw        []byte
	wellFormed bool
	facts      payloadFacts // consumer facts, recorded by ObjectWriter
}

// RawPayload wraps a JSON object produced outside ObjectWriter. The
// dispatcher validates it and drops the action if it is not a JSON object.
func RawPayload(b []byte) Payload { return Payload{raw: b} }

// Bytes returns the JSON text. The caller must not modify it.
func (p Payload) Bytes() []byte { return p.raw }

// Validate reports why p cannot be sent as any action's payload under the
// default MaxPayloadBytes cap, or nil: it must be one JSON object whose keys
// ascend, with no key repeated, in every object. CheckAction adds the rules
// of the action's type.
func (p Payload) Validate() error { return p.ValidateWithin(MaxPayloadBytes) }

// ValidateWithin is Validate under a cap of limit bytes.
func (p Payload) ValidateWithin(limit int) error {
	_, err := p.checkWithin(limit)
	return err
}

// checkWithin validates p under a cap of limit bytes and returns its
// consumer facts.
func (p Payload) checkWithin(limit int) (payloadFacts, error) {
	if len(p.raw) > limit {
		return 0, fmt.Errorf("payload is %d bytes, over the %d-byte limit", len(p.raw), limit)
	}
	if p.wellFormed {
		return p.facts, nil
	}
	return scanPayload(p.raw)
}

// MarshalJSON writes the payload as it is; an empty payload is {}.
func (p Payload) MarshalJSON() ([]byte, error) {
	if len(p.raw) == 0 {
		return []byte("{}"), nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p.raw, nil
}

// ObjectWriter appends one JSON object, with keys in ascending byte order as
// the wire format asks. Its zero value is ready to use; NewObjectWriter lets
// a policy supply a buffer of the right capacity.
type ObjectWriter struct {
	buf     []byte
	lastKey string
	fields  int
	err     error
	facts   payloadFacts
}

// NewObjectWriter starts an object in buf[:0].
func NewObjectWriter(buf []byte) ObjectWriter { return ObjectWriter{buf: buf[:0]} }

func (w *ObjectWriter) key(k string) {
	if w.err != nil {
		return
	}
	if w.fields == 0 {
		w.buf = append(w.buf, '{')
	} else {
		if k <= w.lastKey {
			w.err = fmt.Errorf("payload key %q written after %q: keys must ascend", k, w.lastKey)
			return
		}
		w.buf = append(w.buf, ',')
	}
	w.fields++
	w.lastKey = k
	w.buf = AppendJSONString(w.buf, k)
	w.buf = append(w.buf, ':')
}

// String writes a string field.
func (w *ObjectWriter) String(k, v string) {
	w.key(k)
	if w.err == nil {
		w.buf = AppendJSONString(w.buf, v)
		w.facts.noteString(k, v)
	}
}

// Bool writes a boolean field.
func (w *ObjectWriter) Bool(k string, v bool) {
	w.key(k)
	if w.err == nil {
		w.buf = strconv.AppendBool(w.buf, v)
		w.facts.noteOther(k)
	}
}

// Int writes an integer field.
func (w *ObjectWriter) Int(k string, v int64) {
	w.key(k)
	if w.err == nil {
		w.buf = strconv.AppendInt(w.buf, v, 10)
		w.facts.noteOther(k)
	}
}

// Float writes a number field. Whole numbers keep a ".0" so that consumers
// that type the field as a float read them as written by other routers.
func (w *ObjectWriter) Float(k string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		if w.err == nil {
			w.err = fmt.Errorf("payload key %q: %v is not a JSON number", k, v)
		}
		return
	}
	w.key(k)
	if w.err != nil {
		return
	}
	w.facts.noteOther(k)
	start := len(w.buf)
	w.buf = strconv.AppendFloat(w.buf, v, 'f', -1, 64)
	if bytes.IndexByte(w.buf[start:], '.') < 0 {
		w.buf = append(w.buf, '.', '0')
	}
}

// Uint64s writes a list of unsigned 64-bit integers (block hashes).
func (w *ObjectWriter) Uint64s(k string, v []uint64) {
	w.key(k)
	if w.err != nil {
		return
	}
	w.facts.noteHashes(k, len(v))
	w.buf = append(appendUint64List(append(w.buf, '['), v), ']')
}

// Payload closes the object and returns it, or the first error.
func (w *ObjectWriter) Payload() (Payload, error) {
	if w.err != nil {
		return Payload{}, w.err
	}
	if w.fields == 0 {
		w.buf = append(w.buf, '{')
	}
	w.buf = append(w.buf, '}')
	return Payload{raw: w.buf, wellFormed: true, facts: w.facts}, nil
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// so the result is always valid JSON. Dispatchers write the hint envelope
// with it, so envelope and payloads escape alike.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\ufffd`...)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
