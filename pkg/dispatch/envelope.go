package dispatch

import (
	"strconv"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// ProtocolVersion is the hint envelope version (docs/design.md, 8a), the one
// Dynamo-compatible engines accept.
const ProtocolVersion = "0.1"

// MaxActions is the most actions one hint carries; later ones are dropped.
const MaxActions = 32

// The envelope is written by hand, append-style: encoding/json would cost
// reflection and several allocations per booking, and the payloads are JSON
// already.
const (
	envelopeHead  = `{"protocol_version":"` + ProtocolVersion + `","message_id":`
	envelopeOpen  = `,"actions":[`
	envelopeClose = `]}`
)

// encodeMessage writes the hint message for messageID and its actions
// (numbered from a1) into buf's memory, from its start: a buffer of exactly
// the right size when buf is nil or too small.
func encodeMessage(buf []byte, messageID string, actions []*hints.Action) []byte {
	idLen, plain := jsonStringLen(messageID)
	// Every action but the first has a comma before it.
	size := len(envelopeHead) + idLen + len(envelopeOpen) + len(envelopeClose) - 1
	for i, a := range actions {
		size += actionOverhead + digits(i+1) + len(a.Type) + len(a.Version) + len(a.Payload.Bytes())
	}
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	buf = append(buf[:0], envelopeHead...)
	if plain {
		// Request IDs are nearly always UUID-like: nothing to escape.
		buf = append(append(append(buf, '"'), messageID...), '"')
	} else {
		buf = hints.AppendJSONString(buf, messageID)
	}
	buf = append(buf, envelopeOpen...)
	for i, a := range actions {
		buf = appendAction(buf, i+1, a)
	}
	return append(buf, envelopeClose...)
}

// actionOverhead is the length of an encoded action less its variable
// parts, the comma before it included.
var actionOverhead = len(`,{"action_id":"a","action_type":"","action_version":"","payload":}`)

func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// jsonStringLen is the length of s as hints.AppendJSONString writes it, and
// whether s is printable ASCII that needs no escaping. The length may only
// overestimate (non-ASCII), never under: the buffer is sized with it.
func jsonStringLen(s string) (n int, plain bool) {
	n, plain = 2, true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 0x20 && c < 0x80 && c != '"' && c != '\\':
			n++
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n, plain = n+2, false
		default:
			// A control byte is \u00XX; a stray non-UTF-8 byte is \ufffd;
			// a valid multi-byte rune is shorter than 6 per byte.
			n, plain = n+6, false
		}
	}
	return n, plain
}

// appendAction appends the n-th action (n from 1), preceded by a comma for
// all but the first. The action must have passed hints.CheckAction, whose alphabet for
// types and versions lets them be written unescaped.
func appendAction(dst []byte, n int, a *hints.Action) []byte {
	if n > 1 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"action_id":"a`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, `","action_type":"`...)
	dst = append(dst, a.Type...)
	dst = append(dst, `","action_version":"`...)
	dst = append(dst, a.Version...)
	dst = append(dst, `","payload":`...)
	dst = append(dst, a.Payload.Bytes()...)
	return append(dst, '}')
}
