package builtin_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

func TestKVEvictParameters(t *testing.T) {
	for _, tt := range []paramCase{
		{name: "none", params: ""},
		{name: "empty mapping", params: "{}"},
		{name: "any key is unknown", params: `{"ttl_seconds": 5}`, errKey: "ttl_seconds", errWord: "takes no parameters"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseHint(t, "kv-evict", tt.params)
			checkParamResult(t, err, tt)
		})
	}
}

func TestKVEvictBuild(t *testing.T) {
	const evict = `{"block_hashes":[],"execute_at":"request_completion","include_current_request":true}`
	tests := []struct {
		name    string
		session hints.Session
		want    []rendered
	}{
		{"outside a session", hints.Session{}, []rendered{}},
		{"a middle turn", hints.Session{ID: "s1", Turn: 2}, []rendered{}},
		{"the final turn", hints.Session{ID: "s1", Turn: 3, Final: true}, []rendered{{"kv.evict", "1.0", evict}}},
		{"final without a session ID is not a session", hints.Session{Final: true}, []rendered{}},
	}
	h, err := parseHint(t, "kv-evict", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc := hintstest.Booking{RequestID: "r1", Worker: "w1", PromptTokens: 100, BlockSize: 16, Session: tt.session}
			if diff := cmp.Diff(tt.want, build(t, h, hc)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}
