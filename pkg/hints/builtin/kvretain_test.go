package builtin_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

func TestKVRetainParameters(t *testing.T) {
	runParamCases(t, "kv-retain", []paramCase{
		{name: "defaults", params: "", want: `{"ttl_seconds":300,"priority":50,"min_prompt_tokens":0}`},
		{name: "all set", params: `{"ttl_seconds": 86400, "priority": 0, "min_prompt_tokens": 1024}`, want: `{"ttl_seconds":86400,"priority":0,"min_prompt_tokens":1024}`},
		{name: "ttl 0", params: `{"ttl_seconds": 0}`, errKey: "ttl_seconds", errWord: "0 is out of range 1..86400"},
		{name: "ttl over a day", params: `{"ttl_seconds": 86401}`, errKey: "ttl_seconds", errWord: "86401 is out of range 1..86400"},
		{name: "priority over 100", params: `{"priority": 101}`, errKey: "priority", errWord: "101 is out of range 0..100"},
		{name: "negative priority", params: `{"priority": -1}`, errKey: "priority", errWord: "out of range 0..100"},
		{name: "negative min_prompt_tokens", params: `{"min_prompt_tokens": -5}`, errKey: "min_prompt_tokens", errWord: "out of range"},
		{name: "fractional ttl", params: `{"ttl_seconds": 2.5}`, errKey: "ttl_seconds", errWord: "invalid type: floating point `2.5`"},
		{name: "unknown key", params: `{"ttl": 5}`, errKey: "ttl", errWord: "known: min_prompt_tokens, priority, ttl_seconds"},
	})
}

func TestKVRetainBuild(t *testing.T) {
	const retain = `{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":300.0}`
	tests := []struct {
		name    string
		params  string
		session hints.Session
		prompt  int
		want    []rendered
	}{
		{"outside a session: nothing to keep", "", hints.Session{}, 512, []rendered{}},
		{"first turn", "", hints.Session{ID: "s1", Turn: 1}, 512, []rendered{{"kv.retain", "1.0", retain}}},
		{"final turn: nothing to keep for", "", hints.Session{ID: "s1", Turn: 3, Final: true}, 512, []rendered{}},
		{"short prompt skipped", `{"min_prompt_tokens": 1024}`, hints.Session{ID: "s1", Turn: 2}, 512, []rendered{}},
		{"prompt at the threshold", `{"min_prompt_tokens": 512, "ttl_seconds": 600, "priority": 90}`, hints.Session{ID: "s1", Turn: 2}, 512, []rendered{{"kv.retain", "1.0",
			`{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":90,"ttl_seconds":600.0}`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := parseHint(t, "kv-retain", tt.params)
			if err != nil {
				t.Fatal(err)
			}
			hc := hintstest.Booking{RequestID: "r1", Worker: "w1", PromptTokens: tt.prompt, BlockSize: 16, Session: tt.session}
			if diff := cmp.Diff(tt.want, build(t, h, hc)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}
