package hints_test

import (
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func TestCheckAction(t *testing.T) {
	good := hints.RawPayload([]byte(`{"a":1}`))
	for _, tc := range []struct {
		typ, version string
		payload      hints.Payload
		ok           bool
	}{
		{"kv.fetch", "1.0", good, true},
		{"kv.evict", "2", good, true},
		{"vendor_x.kv-pin", "1.2.3", good, true},
		{"", "1.0", good, false},
		{"Kv.fetch", "1.0", good, false},
		{".kv", "1.0", good, false},
		{`kv"x`, "1.0", good, false},
		{strings.Repeat("k", 65), "1.0", good, false},
		{"kv.fetch", "", good, false},
		{"kv.fetch", "v1", good, false},
		{"kv.fetch", "1..0", good, false},
		{"kv.fetch", ".1", good, false},
		{"kv.fetch", "1.", good, false},
		{"kv.fetch", "1.0", hints.Payload{}, false},
		{"kv.fetch", "1.0", hints.RawPayload([]byte(`{"a":`)), false},
		{"kv.fetch", "1.0", hints.RawPayload([]byte(`"s"`)), false},
	} {
		err := hints.CheckAction(&hints.Action{Type: tc.typ, Version: tc.version, Payload: tc.payload})
		if (err == nil) != tc.ok {
			t.Errorf("hints.CheckAction(%q, %q, %q) = %v, want ok=%v", tc.typ, tc.version, tc.payload.Bytes(), err, tc.ok)
		}
	}
}
