package hints

import (
	"errors"
	"fmt"
)

// Limits on an action's type and version. Dispatchers write both into the
// hint envelope unescaped, so their alphabet is part of what CheckAction
// enforces.
const (
	MaxActionTypeLength    = 64
	MaxActionVersionLength = 16
)

// CheckAction reports why the dispatcher would drop an action as
// malformed, or nil, so that a plugin's tests can hold its actions to the
// same rules. A type is a dotted lower-case name such as kv.fetch; a
// version is dotted digits such as 1.0; the payload is one JSON object
// within MaxPayloadBytes whose keys ascend and never repeat; and a payload
// of a type whose engine consumer has known rules keeps them (docs/design.md, 8a):
// a kv.fetch carries a non-empty block_hashes list of integers in
// [0, 2^64) and a non-empty source_control_endpoint string (a fetch that
// does not say where to fetch from is refused).
// Payloads written with an ObjectWriter are checked from what the writer
// recorded; others are scanned.
func CheckAction(a *Action) error { return CheckActionWithin(a, MaxPayloadBytes) }

// CheckActionWithin is CheckAction with a payload cap of maxPayloadBytes
// instead of MaxPayloadBytes: a dispatcher that accepts larger bookings
// (a copy of tens of thousands of blocks) accepts their payloads.
func CheckActionWithin(a *Action, maxPayloadBytes int) error {
	if err := checkActionType(a.Type); err != nil {
		return err
	}
	if err := checkActionVersion(a.Version); err != nil {
		return fmt.Errorf("action %s: %w", a.Type, err)
	}
	facts, err := a.Payload.checkWithin(maxPayloadBytes)
	if err == nil {
		err = checkConsumerRules(a.Type, facts)
	}
	if err != nil {
		return fmt.Errorf("action %s@%s: %w", a.Type, a.Version, err)
	}
	return nil
}

var errEmptyActionType = errors.New("action type is empty")

func checkActionType(t string) error {
	if t == "" {
		return errEmptyActionType
	}
	if len(t) > MaxActionTypeLength {
		return fmt.Errorf("action type is %d bytes, over the %d allowed", len(t), MaxActionTypeLength)
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
	bad := v == "" || len(v) > MaxActionVersionLength || v[0] == '.' || v[len(v)-1] == '.'
	for i := 0; !bad && i < len(v); i++ {
		c := v[i]
		bad = !(c >= '0' && c <= '9' || c == '.' && v[i-1] != '.')
	}
	if bad {
		return fmt.Errorf("action version %q: want dotted digits such as 1.0", v)
	}
	return nil
}
