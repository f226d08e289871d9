package receivers_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/test/receivers"
)

// good is the hint of docs/design.md (8a): a fetch, a retain and an evict.
const good = `{"protocol_version":"0.1","message_id":"r1","actions":[
 {"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22,11],"source_control_endpoint":"tcp://10.0.0.7:23280"}},
 {"action_id":"a2","action_type":"kv.retain","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":300.0}},
 {"action_id":"a3","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[33],"source_control_endpoint":"tcp://10.0.0.8:23280"}}]}`

func TestEveryReceiverTakesTheDesignHint(t *testing.T) {
	got, err := receivers.CheckAll([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	// KVCR reads the first kv.fetch only, duplicates dropped.
	want := &receivers.Fetch{Mode: "copy", SourceControlEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22}}
	if d := cmp.Diff(want, got["kvcr"].Fetch); d != "" {
		t.Errorf("KVCR's fetch (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"a1": "read", "a2": "skipped", "a3": "skipped"}, got["kvcr"].Actions); d != "" {
		t.Errorf("KVCR's actions (-want +got):\n%s", d)
	}
	// vLLM leaves actions outside vllm.* to its KV backend.
	if d := cmp.Diff(map[string]string{"a1": "backend", "a2": "backend", "a3": "backend"}, got["vllm"].Actions); d != "" {
		t.Errorf("vLLM's actions (-want +got):\n%s", d)
	}
}

// TestReceiversRefuse holds each checker to what its receiver refuses,
// ignores or warns about, from the rules' data.
func TestReceiversRefuse(t *testing.T) {
	all, err := receivers.All()
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(payload string) string {
		return `{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":` + payload + `}]}`
	}
	for _, tc := range []struct {
		receiver, name, msg string
		want                string // a word of the refusal; "ignored" or "warn:" for those
	}{
		{"kvcr", "not an object", `[1]`, "JSON object"},
		{"kvcr", "no actions list", `{"protocol_version":"0.1","message_id":"r1","actions":{}}`, "actions must be a list"},
		{"kvcr", "no kv.fetch", `{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.evict","action_version":"1.0","payload":{}}]}`, "no kv.fetch action"},
		{"kvcr", "payload not a mapping", fetch(`[11]`), "payload must be an object"},
		{"kvcr", "mode neither copy nor move", fetch(`{"block_hashes":[1],"mode":"link"}`), "mode must be one of copy, move"},
		{"kvcr", "no_retain not a bool", fetch(`{"block_hashes":[1],"no_retain":"yes"}`), "no_retain must be a bool"},
		{"kvcr", "empty source endpoint", fetch(`{"block_hashes":[1],"source_control_endpoint":""}`), "non-empty string"},
		{"kvcr", "no block hashes", fetch(`{"source_control_endpoint":"tcp://a:1"}`), "block_hashes is required"},
		{"kvcr", "empty block hashes", fetch(`{"block_hashes":[]}`), "non-empty list"},
		{"kvcr", "a bool hash", fetch(`{"block_hashes":[true]}`), "is not an integer"},
		{"kvcr", "a negative hash", fetch(`{"block_hashes":[-1]}`), "not an integer in [0, 2^64)"},
		{"kvcr", "a hash of 2^64", fetch(`{"block_hashes":[18446744073709551616]}`), "not an integer in [0, 2^64)"},
		{"kvcr", "a float hash", fetch(`{"block_hashes":[1.0]}`), "not an integer in [0, 2^64)"},
		{"kvcr", "another version is only warned", strings.Replace(fetch(`{"block_hashes":[1]}`), `"0.1"`, `"0.2"`, 1), "warn:0.2"},
		{"vllm", "no protocol_version", `{"message_id":"r1","actions":[]}`, "protocol_version is required"},
		{"vllm", "payload not an object", fetch(`"x"`), "payload must be an object"},
		{"vllm", "action_id missing", `{"protocol_version":"0.1","message_id":"r1","actions":[{"action_type":"kv.fetch","action_version":"1.0","payload":{}}]}`, "action_id is required"},
		{"trtllm", "empty message_id", `{"protocol_version":"0.1","message_id":"","actions":[]}`, "message_id must be a non-empty string"},
		{"trtllm", "empty action_version", `{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"","payload":{}}]}`, "action_version must be a non-empty string"},
		{"trtllm", "another version is ignored", `{"protocol_version":"1.0","message_id":"r1","actions":[]}`, "ignored"},
		{"sglang", "another version", `{"protocol_version":"0.2","message_id":"r1","actions":[]}`, `protocol_version "0.2" is not 0.1`},
		{"sglang", "message_id a number", `{"protocol_version":"0.1","message_id":7,"actions":[]}`, "message_id must be a string"},
		{"sglang", "payload a list", fetch(`[]`), "payload must be an object"},
	} {
		t.Run(tc.receiver+"/"+tc.name, func(t *testing.T) {
			v := all[tc.receiver].Check([]byte(tc.msg))
			switch {
			case tc.want == "ignored":
				if !v.Ignored || v.Err != nil {
					t.Errorf("verdict %+v, want ignored", v)
				}
			case strings.HasPrefix(tc.want, "warn:"):
				if v.Err != nil || len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], strings.TrimPrefix(tc.want, "warn:")) {
					t.Errorf("verdict %+v, want taken with a warning", v)
				}
			case v.Err == nil || !strings.Contains(v.Err.Error(), tc.want):
				t.Errorf("verdict %+v, want a refusal with %q", v, tc.want)
			}
		})
	}
	// vLLM answers a native action of another version unsupported.
	v := all["vllm"].Check([]byte(`{"protocol_version":"0.2","message_id":"r1","actions":[{"action_id":"a1","action_type":"vllm.pin","action_version":"1.0","payload":{}}]}`))
	if v.Err != nil || v.Actions["a1"] != "unsupported" {
		t.Errorf("vLLM, a native action under 0.2: %+v, want unsupported", v)
	}
}

// TestSenderVersionIsEveryReceivers holds the envelope version the
// dispatcher writes (a constant: no option, flag or config can change it)
// to the one version every receiver reads without refusing, ignoring or
// warning: receivers disagree on any other.
func TestSenderVersionIsEveryReceivers(t *testing.T) {
	if dispatch.ProtocolVersion != "0.1" {
		t.Fatalf("dispatch.ProtocolVersion is %q; the only version every receiver takes is 0.1", dispatch.ProtocolVersion)
	}
	all, err := receivers.All()
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range all {
		if !slices.Contains(r.Envelope.Versions, dispatch.ProtocolVersion) {
			t.Errorf("%s reads versions %v, not the sender's %s", name, r.Envelope.Versions, dispatch.ProtocolVersion)
		}
	}
	// A message the dispatcher builds carries it.
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: dispatch.StaticWorkers{"w1": true}})
	if err := d.Load([]byte("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}]\n"), "inline"); err != nil {
		t.Fatal(err)
	}
	h, err := d.Build(context.Background(), &dispatch.Booking{RequestID: "r1", Role: "decode", Worker: "w1", BlockSize: 16,
		KVCopy: &hints.CommittedCopy{SourceEndpoint: "tcp://10.0.0.7:1", BlockHashes: []uint64{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receivers.CheckAll(h.Message); err != nil || !strings.HasPrefix(string(h.Message), `{"protocol_version":"0.1",`) {
		t.Errorf("built %s: %v", h.Message, err)
	}
}
