package hints_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/internal/hostbridge"
)

func TestObjectWriter(t *testing.T) {
	tests := []struct {
		name    string
		write   func(w *hints.ObjectWriter)
		want    string
		wantErr string
	}{
		{"empty object", func(*hints.ObjectWriter) {}, `{}`, ""},
		{"fetch payload", func(w *hints.ObjectWriter) {
			w.Uint64s("block_hashes", []uint64{11, 22, math.MaxUint64})
			w.String("source_control_endpoint", "tcp://10.0.0.7:23280")
		}, `{"block_hashes":[11,22,18446744073709551615],"source_control_endpoint":"tcp://10.0.0.7:23280"}`, ""},
		{"retain payload", func(w *hints.ObjectWriter) {
			w.Uint64s("block_hashes", nil)
			w.String("execute_at", "request_completion")
			w.Bool("include_current_request", true)
			w.Int("priority", 50)
			w.Float("ttl_seconds", 300)
		}, `{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":300.0}`, ""},
		{"fractional float", func(w *hints.ObjectWriter) { w.Float("x", 0.25) }, `{"x":0.25}`, ""},
		{"escaping", func(w *hints.ObjectWriter) { w.String("s", "a\"b\\c\n\x01\xff") }, `{"s":"a\"b\\c\n\u0001\ufffd"}`, ""},
		{"keys out of order", func(w *hints.ObjectWriter) { w.Int("b", 1); w.Int("a", 2) }, "", `"a" written after "b"`},
		{"repeated key", func(w *hints.ObjectWriter) { w.Int("a", 1); w.Int("a", 2) }, "", `"a" written after "a"`},
		{"NaN", func(w *hints.ObjectWriter) { w.Float("x", math.NaN()) }, "", "not a JSON number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w hints.ObjectWriter
			tt.write(&w)
			p, err := w.Payload()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(p.Bytes()); got != tt.want {
				t.Errorf("got %s\nwant %s", got, tt.want)
			}
			if !json.Valid(p.Bytes()) {
				t.Errorf("not valid JSON: %s", p.Bytes())
			}
			if err := p.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestRawPayloadValidate(t *testing.T) {
	tests := []struct {
		raw     string
		wantErr string
	}{
		{`{"a": 1}`, ""},
		{` {"a": [1, 2]} `, ""},
		{``, "empty"},
		{`[1]`, "must be a JSON object"},
		{`"x"`, "must be a JSON object"},
		{`{"a": }`, "not valid JSON"},
		{`{"a": 1}}`, "not valid JSON"},
		{`{"a":"` + strings.Repeat("x", hints.MaxPayloadBytes) + `"}`, "over the"},
	}
	for _, tt := range tests {
		err := hints.RawPayload([]byte(tt.raw)).Validate()
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
			t.Errorf("Validate(%.20q) = %v; want %q", tt.raw, err, tt.wantErr)
		}
	}
}

func TestWritePayloadArena(t *testing.T) {
	write := func(hc *hints.HintContext, v uint64) hints.Payload {
		t.Helper()
		w := hc.PayloadWriter(8)
		w.Uint64s("h", []uint64{v, v})
		p, err := hc.ClosePayload(&w)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Room for both: they share the arena and do not overlap.
	arena := make([]byte, 0, 64)
	hc := &hints.HintContext{}
	hostbridge.Of[hints.HintContext, hints.CommittedCopy, hints.Action](hc).Arena = arena
	a, b := write(hc, 1), write(hc, 22)
	if string(a.Bytes()) != `{"h":[1,1]}` || string(b.Bytes()) != `{"h":[22,22]}` {
		t.Fatalf("payloads %s %s", a.Bytes(), b.Bytes())
	}
	if &a.Bytes()[0] != &arena[:1][0] || &b.Bytes()[0] != &arena[:len(a.Bytes())+1][len(a.Bytes())] {
		t.Error("payloads were not written into the arena, one after the other")
	}
	// No room left for the third: it gets memory of its own, and the first
	// two are untouched.
	c := write(hc, 1<<63)
	if string(a.Bytes()) != `{"h":[1,1]}` || string(b.Bytes()) != `{"h":[22,22]}` || string(c.Bytes()) != `{"h":[9223372036854775808,9223372036854775808]}` {
		t.Fatalf("payloads %s %s %s", a.Bytes(), b.Bytes(), c.Bytes())
	}
	// Without an arena, PayloadWriter allocates.
	if p := write(&hints.HintContext{}, 5); string(p.Bytes()) != `{"h":[5,5]}` {
		t.Fatalf("payload %s", p.Bytes())
	}
}

// TestActionsLent: HintContext.Actions hands out the lent action memory in
// turn, never overlapping, each slice capped at what it asked for, and
// makes a slice of its own when the rest is too small or none is lent.
func TestActionsLent(t *testing.T) {
	lent := make([]hints.Action, 0, 3)
	hc := &hints.HintContext{}
	hostbridge.Of[hints.HintContext, hints.CommittedCopy, hints.Action](hc).Actions = lent
	a := append(hc.Actions(1), hints.Action{Type: "a"})
	b := append(hc.Actions(2), hints.Action{Type: "b1"}, hints.Action{Type: "b2"})
	if &a[0] != &lent[:1][0] || &b[0] != &lent[:2][1] {
		t.Fatal("the actions were not taken from the lent memory, one after the other")
	}
	// Appending past what was asked for leaves the lent memory: b's
	// second action, next to it, is untouched.
	a = append(a, hints.Action{Type: "a2"})
	if &a[0] == &lent[:1][0] || b[1].Type != "b2" || a[1].Type != "a2" {
		t.Fatalf("an append past the slice's room wrote into the lent memory: a %v, b %v", a, b)
	}
	// Nothing left: a slice of its own, which the lent actions do not see.
	c := append(hc.Actions(1), hints.Action{Type: "c"})
	if cap(c) != 1 || b[0].Type != "b1" || b[1].Type != "b2" {
		t.Fatalf("with the lent memory taken: c %v (cap %d), b %v", c, cap(c), b)
	}
	// Without lent memory, Actions makes a slice, and a request of 0 gets
	// an empty one.
	if d := (&hints.HintContext{}).Actions(2); len(d) != 0 || cap(d) != 2 {
		t.Fatalf("Actions(2) without lent memory: len %d cap %d", len(d), cap(d))
	}
	if e := hc.Actions(0); len(e) != 0 {
		t.Fatalf("Actions(0): len %d", len(e))
	}
}
