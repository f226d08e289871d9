package router

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/kvrouter/kv-hint-operator/internal/hints"
)

// ProtocolVersion is the hint envelope version (DESIGN 8a), the one
// Dynamo-compatible engines accept.
const ProtocolVersion = "0.1"

// MaxActions is the most actions one hint carries; later ones are dropped.
const MaxActions = 32

// Limits on an action's type and version. Both are written into the envelope
// unescaped, so their alphabet is part of what checkAction enforces.
const (
	maxActionTypeLen    = 64
	maxActionVersionLen = 16
)

// The envelope is written by hand, append-style: encoding/json would cost
// reflection and several allocations per booking, and the payloads are JSON
// already.
const (
	envelopeHead  = `{"protocol_version":"` + ProtocolVersion + `","message_id":`
	envelopeOpen  = `,"actions":[`
	envelopeClose = `]}`
)

// appendEnvelopeHead starts a hint message for messageID.
func appendEnvelopeHead(dst []byte, messageID string) []byte {
	dst = append(dst, envelopeHead...)
	dst = hints.AppendJSONString(dst, messageID)
	return append(dst, envelopeOpen...)
}

// appendAction appends the n-th action (n from 1), preceded by a comma for
// all but the first. The action must have passed checkAction.
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

// checkAction reports why an action cannot be sent, or nil. A type is a
// dotted lower-case name such as kv.fetch; a version is dotted digits such as
// 1.0. Payloads written with hints.ObjectWriter are trusted; others are
// scanned.
func checkAction(a *hints.Action) error {
	if err := checkActionType(a.Type); err != nil {
		return err
	}
	if err := checkActionVersion(a.Version); err != nil {
		return fmt.Errorf("action %s: %w", a.Type, err)
	}
	if err := a.Payload.Validate(); err != nil {
		return fmt.Errorf("action %s@%s: %w", a.Type, a.Version, err)
	}
	return nil
}

var errEmptyActionType = errors.New("action type is empty")

func checkActionType(t string) error {
	if t == "" {
		return errEmptyActionType
	}
	if len(t) > maxActionTypeLen {
		return fmt.Errorf("action type is %d bytes, over the %d allowed", len(t), maxActionTypeLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		lower := c >= 'a' && c <= 'z'
		if lower || i > 0 && (c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			continue
		}
		return fmt.Errorf("action type %q: want a lower-case dotted name such as kv.fetch", t)
	}
	return nil
}

func checkActionVersion(v string) error {
	bad := v == "" || len(v) > maxActionVersionLen || v[0] == '.' || v[len(v)-1] == '.'
	for i := 0; !bad && i < len(v); i++ {
		c := v[i]
		bad = !(c >= '0' && c <= '9' || c == '.' && v[i-1] != '.')
	}
	if bad {
		return fmt.Errorf("action version %q: want dotted digits such as 1.0", v)
	}
	return nil
}
