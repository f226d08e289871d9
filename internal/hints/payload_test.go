package hints_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/hints"
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
