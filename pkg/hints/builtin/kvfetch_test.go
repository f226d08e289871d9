package builtin_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

func TestKVFetchParameters(t *testing.T) {
	runParamCases(t, "kv-fetch", []paramCase{
		{name: "defaults", params: "", want: `{"min_blocks":1,"max_blocks":0}`},
		{name: "both set", params: `{"min_blocks": 4, "max_blocks": 16}`, want: `{"min_blocks":4,"max_blocks":16}`},
		{name: "min_blocks 0", params: `{"min_blocks": 0}`, errKey: "min_blocks", errWord: "0 is out of range 1..1048576"},
		{name: "negative max_blocks", params: `{"max_blocks": -1}`, errKey: "max_blocks", errWord: "-1 is out of range 0..1048576"},
		{name: "max below min", params: `{"min_blocks": 8, "max_blocks": 4}`, errKey: "max_blocks", errWord: "below min_blocks 8"},
		{name: "wrong type", params: `{"min_blocks": "4"}`, errKey: "min_blocks", errWord: "an integer"},
		{name: "unknown key", params: `{"blocks": 4}`, errKey: "blocks", errWord: "known: max_blocks, min_blocks"},
	})
}

func TestKVFetchBuild(t *testing.T) {
	copyOf := func(endpoint string, n int) *hints.CommittedCopy {
		c := &hints.CommittedCopy{SourceWorker: "w2", SourceEndpoint: endpoint}
		for i := 1; i <= n; i++ {
			c.BlockHashes = append(c.BlockHashes, uint64(i*11))
		}
		return c
	}
	tests := []struct {
		name   string
		params string
		copy   *hints.CommittedCopy
		want   []rendered
	}{
		{"no copy, no action", "", nil, []rendered{}},
		{"empty copy, no action: consumers refuse an empty fetch", "", copyOf("tcp://w2:1", 0), []rendered{}},
		{"copy sent", "", copyOf("tcp://10.0.0.7:23280", 2), []rendered{{"kv.fetch", "1.0",
			`{"block_hashes":[11,22],"source_control_endpoint":"tcp://10.0.0.7:23280"}`}}},
		{"no endpoint, no action: consumers refuse a source-less fetch", "", copyOf("", 1), []rendered{}},
		{"no endpoint and many blocks, still no action", `{"min_blocks": 1, "max_blocks": 2}`, copyOf("", 8), []rendered{}},
		{"below min_blocks", `{"min_blocks": 3}`, copyOf("tcp://w2:1", 2), []rendered{}},
		{"at min_blocks", `{"min_blocks": 2}`, copyOf("tcp://w2:1", 2), []rendered{{"kv.fetch", "1.0",
			`{"block_hashes":[11,22],"source_control_endpoint":"tcp://w2:1"}`}}},
		{"max_blocks keeps the first blocks", `{"max_blocks": 2}`, copyOf("tcp://w2:1", 4), []rendered{{"kv.fetch", "1.0",
			`{"block_hashes":[11,22],"source_control_endpoint":"tcp://w2:1"}`}}},
		{"largest hash", "", &hints.CommittedCopy{SourceEndpoint: "tcp://w2:1", BlockHashes: []uint64{1<<64 - 1}}, []rendered{{"kv.fetch", "1.0",
			`{"block_hashes":[18446744073709551615],"source_control_endpoint":"tcp://w2:1"}`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := parseHint(t, "kv-fetch", tt.params)
			if err != nil {
				t.Fatal(err)
			}
			hc := hintstest.Booking{RequestID: "r1", Role: "decode", Worker: "w1", PromptTokens: 512, BlockSize: 16, KVCopy: tt.copy}

			if diff := cmp.Diff(tt.want, build(t, h, hc)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}
