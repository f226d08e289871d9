package builtin_test

import (
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

func TestSelectionPolicies(t *testing.T) {
	tests := []struct {
		typ     string
		params  string
		want    string // effective parameters, JSON; "" for types without any
		commits bool
		errKey  string
		errWord string
	}{
		{typ: "dynamo-default-cost-fn", want: `{"overlap_score_weight":1,"temperature":0}`},
		{typ: "dynamo-default-cost-fn", params: `{"temperature": 0.7, "overlap_score_weight": 2}`, want: `{"overlap_score_weight":2,"temperature":0.7}`},
		{typ: "dynamo-default-cost-fn", params: `{"temperature": -1}`, errKey: "temperature", errWord: "-1 is out of range 0..100"},
		{typ: "dynamo-default-cost-fn", params: `{"shared_cache_multiplier": 1}`, errKey: "shared_cache_multiplier", errWord: "unknown parameter"},
		{typ: "kvcr", want: `{"shared_cache_multiplier":0.5,"overlap_score_weight":1}`, commits: true},
		{typ: "kvcr", params: `{"shared_cache_multiplier": 0}`, want: `{"shared_cache_multiplier":0,"overlap_score_weight":1}`},
		{typ: "kvcr", params: `{"shared_cache_multiplier": 1e-9}`, want: `{"shared_cache_multiplier":1e-9,"overlap_score_weight":1}`, commits: true},
		{typ: "kvcr", params: `{"shared_cache_multiplier": -0.1}`, errKey: "shared_cache_multiplier", errWord: "-0.1 is out of range 0..100"},
		{typ: "kvcr", params: `{"shared_cache_multiplier": 1e400}`, errKey: "shared_cache_multiplier", errWord: "a number"},
		{typ: "kvcr", params: `{"overlap_score_weight": true}`, errKey: "overlap_score_weight", errWord: "a number"},
		{typ: "round-robin"},
		{typ: "random"},
		{typ: "least-loaded"},
		{typ: "power-of-two"},
		{typ: "power-of-two", params: `{"choices": 3}`, errKey: "choices", errWord: "takes no parameters"},
	}
	cat := builtin.NewCatalog()
	for _, tt := range tests {
		t.Run(tt.typ+" "+tt.params, func(t *testing.T) {
			p, ok := cat.Selection(tt.typ)
			if !ok {
				t.Fatalf("%s is not registered", tt.typ)
			}
			pol, err := p.Parse(hints.Params(tt.params))
			checkParamResult(t, err, paramCase{params: tt.params, errKey: tt.errKey, errWord: tt.errWord})
			if err != nil {
				return
			}
			if pol.CommitsKVCopies() != tt.commits {
				t.Errorf("CommitsKVCopies = %v, want %v", pol.CommitsKVCopies(), tt.commits)
			}
			if tt.want != "" {
				if got := string(effective(t, pol)); got != tt.want {
					t.Errorf("effective parameters %s, want %s", got, tt.want)
				}
			}
		})
	}
}
