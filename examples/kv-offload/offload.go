// Package kvoffload is an example hint policy linked into a custom kvhint
// build: kv-offload moves a long session's blocks to a slower memory tier
// when a non-final turn completes, freeing GPU memory while keeping the
// prefix cheaper to restore than to recompute.
package kvoffload

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Type is the hint policy type roles list.
const Type = "kv-offload"

// Params are kv-offload's parameters.
type Params struct {
	// Tier is where the blocks go: "cpu" or "disk".
	Tier string `json:"tier"`
	// MinPromptTokens skips prompts too short to be worth moving.
	MinPromptTokens int `json:"min_prompt_tokens"`
}

// Provider describes kv-offload to a catalog. It runs only where a role lists
// it: it has no default hosts.
func Provider() hints.HintProvider {
	return hints.HintProvider{
		Type:        Type,
		Description: "kv.offload@1.0: move a long session's blocks to a slower tier after a non-final turn",
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := Params{Tier: "cpu", MinPromptTokens: 4096}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if p.Tier != "cpu" && p.Tier != "disk" {
				return nil, hints.ParamErrorf("tier", "%q is not a tier; use cpu or disk", p.Tier)
			}
			if err := hints.IntInRange("min_prompt_tokens", int64(p.MinPromptTokens), 0, 1<<30); err != nil {
				return nil, err
			}
			// The payload depends only on the parameters: build it once.
			var w hints.ObjectWriter
			w.String("execute_at", "request_completion")
			w.Bool("include_current_request", true)
			w.String("tier", p.Tier)
			payload, err := w.Payload()
			if err != nil {
				return nil, err
			}
			return &offload{params: p, actions: []hints.Action{{Type: "kv.offload", Version: "1.0", Payload: payload}}}, nil
		},
	}
}

// Register adds kv-offload to a catalog.
func Register(cat *hints.Catalog) error { return cat.RegisterHint(Provider()) }

type offload struct {
	params  Params
	actions []hints.Action
}

func (o *offload) EffectiveParameters() any { return o.params }

func (o *offload) BuildHints(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
	if hc.Session.ID == "" || hc.Session.Final || hc.PromptTokens < o.params.MinPromptTokens {
		return nil, nil
	}
	return o.actions, nil
}
