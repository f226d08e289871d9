package builtin

import (
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// costFnParams are the parameters of dynamo-default-cost-fn.
type costFnParams struct {
	// OverlapScoreWeight weighs prefix-cache overlap against load.
	OverlapScoreWeight float64 `json:"overlap_score_weight"`
	// Temperature softens the choice; 0 always picks the lowest cost.
	Temperature float64 `json:"temperature"`
}

type costFn struct{ params costFnParams }

func (c *costFn) CommitsKVCopies() bool    { return false }
func (c *costFn) EffectiveParameters() any { return c.params }

func costFnProvider() hints.SelectionProvider {
	return hints.SelectionProvider{
		Type:        TypeDefaultCostFn,
		Description: "overlap-and-load cost; never commits KV copies",
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			p := costFnParams{OverlapScoreWeight: 1}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := hints.FloatInRange("overlap_score_weight", p.OverlapScoreWeight, 0, 1000); err != nil {
				return nil, err
			}
			if err := hints.FloatInRange("temperature", p.Temperature, 0, 100); err != nil {
				return nil, err
			}
			return &costFn{params: p}, nil
		},
	}
}

// kvcrParams are the parameters of kvcr.
type kvcrParams struct {
	// SharedCacheMultiplier values blocks a peer holds; above 0 the policy
	// books a worker and commits a copy of the peer's blocks to it.
	SharedCacheMultiplier float64 `json:"shared_cache_multiplier"`
	// OverlapScoreWeight weighs local prefix-cache overlap against load.
	OverlapScoreWeight float64 `json:"overlap_score_weight"`
}

type kvcr struct{ params kvcrParams }

func (k *kvcr) CommitsKVCopies() bool    { return k.params.SharedCacheMultiplier > 0 }
func (k *kvcr) EffectiveParameters() any { return k.params }

func kvcrProvider() hints.SelectionProvider {
	return hints.SelectionProvider{
		Type:        TypeKVCR,
		Description: "KV cache reuse; commits KV copies when shared_cache_multiplier > 0",
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			p := kvcrParams{SharedCacheMultiplier: 0.5, OverlapScoreWeight: 1}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := hints.FloatInRange("shared_cache_multiplier", p.SharedCacheMultiplier, 0, 100); err != nil {
				return nil, err
			}
			if err := hints.FloatInRange("overlap_score_weight", p.OverlapScoreWeight, 0, 1000); err != nil {
				return nil, err
			}
			return &kvcr{params: p}, nil
		},
	}
}

// loadOnly is a selection that looks at load alone and never commits copies.
type loadOnly struct{}

func (loadOnly) CommitsKVCopies() bool { return false }

func loadOnlyProviders() []hints.SelectionProvider {
	var out []hints.SelectionProvider
	for _, t := range []struct{ typ, desc string }{
		{"round-robin", "cycles through workers; load only"},
		{"random", "picks a worker at random; load only"},
		{"least-loaded", "picks the least-loaded worker; load only"},
		{"power-of-two", "the less loaded of two random workers; load only"},
	} {
		out = append(out, hints.SelectionProvider{
			Type:        t.typ,
			Description: t.desc,
			Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
				if err := hints.DecodeParams(raw, &struct{}{}); err != nil {
					return nil, err
				}
				return loadOnly{}, nil
			},
		})
	}
	return out
}
