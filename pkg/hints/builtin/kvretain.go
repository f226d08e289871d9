package builtin

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// kvRetainParams are the parameters of kv-retain.
type kvRetainParams struct {
	// TTLSeconds is how long the worker keeps the session's blocks after the
	// request completes.
	TTLSeconds int `json:"ttl_seconds"`
	// Priority ranks retained blocks against others under memory pressure.
	Priority int `json:"priority"`
	// MinPromptTokens skips short prompts, cheap to recompute.
	MinPromptTokens int `json:"min_prompt_tokens"`
}

func kvRetainProvider() hints.HintProvider {
	return hints.HintProvider{
		Type:        TypeKVRetain,
		Description: "kv.retain@1.0: keep a session's blocks after a non-final turn, for the next turn",
		NeverBlocks: true,
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := kvRetainParams{TTLSeconds: 300, Priority: 50}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("ttl_seconds", int64(p.TTLSeconds), 1, 86400); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("priority", int64(p.Priority), 0, 100); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("min_prompt_tokens", int64(p.MinPromptTokens), 0, 1<<30); err != nil {
				return nil, err
			}
			return &kvRetain{params: p, actions: staticAction(hints.ActionKVRetain, "1.0", func(w *hints.ObjectWriter) {
				w.Uint64s("block_hashes", nil)
				w.String("execute_at", "request_completion")
				w.Bool("include_current_request", true)
				w.Int("priority", int64(p.Priority))
				w.Float("ttl_seconds", float64(p.TTLSeconds))
			})}, nil
		},
	}
}

type kvRetain struct {
	params  kvRetainParams
	actions []hints.Action
}

func (r *kvRetain) EffectiveParameters() any { return r.params }

// BuildHints retains a session's blocks on every turn but the last.
func (r *kvRetain) BuildHints(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
	if hc.Session.ID == "" || hc.Session.Final || hc.PromptTokens < r.params.MinPromptTokens {
		return nil, nil
	}
	return r.actions, nil
}
