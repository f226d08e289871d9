package hints_test

import (
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

func TestCheckAction(t *testing.T) {
	good := hints.RawPayload([]byte(`{"block_hashes":[1],"source_control_endpoint":"tcp://a:1"}`))
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

// TestCheckActionConsumerRules: what a KV connector would refuse never
// leaves the dispatcher, whoever wrote the payload. Each bad case is one a
// custom plugin can produce; before these rules each was forwarded.
func TestCheckActionConsumerRules(t *testing.T) {
	written := func(f func(w *hints.ObjectWriter)) hints.Payload {
		w := hints.NewObjectWriter(nil)
		f(&w)
		p, err := w.Payload()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		typ     string
		payload hints.Payload
		wantErr string // "" for none
	}{
		{"fetch written", "kv.fetch", written(func(w *hints.ObjectWriter) {
			w.Uint64s("block_hashes", []uint64{1, 1<<64 - 1})
			w.String("source_control_endpoint", "tcp://10.0.0.7:23280")
		}), ""},
		{"fetch raw", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[0,18446744073709551615],"source_control_endpoint":"tcp://a:1"}`)), ""},
		{"fetch extra keys", "kv.fetch", hints.RawPayload([]byte(`{"a":{"x":[{"k":1}]},"block_hashes":[7],"source_control_endpoint":"tcp://a:1","z":null}`)), ""},
		// The consumer refuses a fetch that does not say where to fetch
		// from; before the rule required the endpoint, these passed.
		{"fetch without endpoint raw", "kv.fetch", hints.RawPayload([]byte(` {"block_hashes":[7]} `)), "source_control_endpoint is required"},
		{"fetch without endpoint written", "kv.fetch", written(func(w *hints.ObjectWriter) { w.Uint64s("block_hashes", []uint64{7}) }),
			"source_control_endpoint is required"},
		{"fetch with the endpoint nested, not at the top", "kv.fetch", hints.RawPayload([]byte(`{"a":{"source_control_endpoint":"tcp://a:1"},"block_hashes":[7]}`)),
			"source_control_endpoint is required"},
		{"unsorted keys", "kv.retain", hints.RawPayload([]byte(`{"ttl_seconds":1,"priority":2}`)), `"priority" comes after "ttl_seconds"`},
		{"unsorted nested keys", "vendor.x", hints.RawPayload([]byte(`{"a":{"b":1,"a":2}}`)), `"a" comes after "b"`},
		{"duplicate keys", "kv.evict", hints.RawPayload([]byte(`{"a":1,"a":2}`)), `"a" is repeated`},
		{"empty fetch written", "kv.fetch", written(func(w *hints.ObjectWriter) { w.Uint64s("block_hashes", nil) }), "non-empty list"},
		{"empty fetch raw", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[]}`)), "non-empty list"},
		{"fetch without hashes", "kv.fetch", hints.RawPayload([]byte(`{"source_control_endpoint":"tcp://a:1"}`)), "block_hashes is required"},
		{"fetch with nothing", "kv.fetch", hints.RawPayload([]byte(`{}`)), "block_hashes is required"},
		{"empty object fetch", "kv.fetch", hints.Payload{}, "payload is empty"},
		{"string hashes raw", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":["1","2"]}`)), "non-empty list"},
		{"string hashes written", "kv.fetch", written(func(w *hints.ObjectWriter) { w.String("block_hashes", "1,2") }), "non-empty list"},
		{"negative hash", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[-1]}`)), "non-empty list"},
		{"hash over 2^64", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[18446744073709551616]}`)), "non-empty list"},
		{"fractional hash", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[1.0]}`)), "non-empty list"},
		{"exponent hash", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[1e3]}`)), "non-empty list"},
		{"hashes not a list", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":{"a":1}}`)), "non-empty list"},
		{"empty endpoint raw", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[1],"source_control_endpoint":""}`)), "non-empty string"},
		{"empty endpoint written", "kv.fetch", written(func(w *hints.ObjectWriter) {
			w.Uint64s("block_hashes", []uint64{1})
			w.String("source_control_endpoint", "")
		}), "non-empty string"},
		{"numeric endpoint", "kv.fetch", hints.RawPayload([]byte(`{"block_hashes":[1],"source_control_endpoint":5}`)), "non-empty string"},
		// Unknown types pass through with any well-formed payload, and the
		// kv.fetch rules apply to kv.fetch alone.
		{"unknown type", "vendor_x.kv-pin", hints.RawPayload([]byte(`{"block_hashes":"anything"}`)), ""},
		{"retain with empty hashes", "kv.retain", hints.RawPayload([]byte(`{"block_hashes":[],"ttl_seconds":300.0}`)), ""},
		{"trailing data", "kv.evict", hints.RawPayload([]byte(`{"a":1}{"b":2}`)), "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := hints.CheckAction(&hints.Action{Type: tc.typ, Version: "1.0", Payload: tc.payload})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckAction: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("CheckAction: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
