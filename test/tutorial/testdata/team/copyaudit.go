// Package copyaudit is the plugin of the plugin tutorial (docs/plugins.md), written as a
// team would: a policy that sends the booking's committed KV copy, hosted
// by default under kvcr in place of the built-in kv-fetch.
package copyaudit

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Params are copy-audit's parameters.
type Params struct {
	// MinBlocks skips copies shorter than this many blocks.
	MinBlocks int `json:"min_blocks"`
}

type audit struct{ p Params }

func (a *audit) BuildHints(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
	c := hc.CommittedKVCopy()
	if c == nil || c.SourceEndpoint == "" || len(c.BlockHashes) < a.p.MinBlocks {
		return nil, nil
	}
	w := hc.PayloadWriter(64 + 21*len(c.BlockHashes) + len(c.SourceEndpoint))
	w.Uint64s(hints.KeyBlockHashes, c.BlockHashes)
	w.String(hints.KeySourceControlEndpoint, c.SourceEndpoint)
	p, err := hc.ClosePayload(&w)
	if err != nil {
		return nil, err
	}
	return []hints.Action{{Type: hints.ActionKVFetch, Version: "1.0", Payload: p}}, nil
}

// EffectiveParameters reports the parameters in force.
func (a *audit) EffectiveParameters() any { return a.p }

// Provider describes copy-audit.
func Provider() hints.HintProvider {
	return hints.HintProvider{
		Type:         "copy-audit",
		Commitments:  hints.KVCopy,
		DefaultHosts: []hints.HintHost{hints.WorkerSelection("kvcr")},
		Description:  "kv.fetch@1.0 of the committed copy, skipping copies under min_blocks",
		NeverBlocks:  true,
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := Params{MinBlocks: 1}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("min_blocks", int64(p.MinBlocks), 1, 1<<20); err != nil {
				return nil, err
			}
			return &audit{p: p}, nil
		},
	}
}

// Register takes kv-fetch out of kvcr's defaults and registers copy-audit
// in its place: kvcr runs one KV copy sender.
func Register(cat *hints.Catalog) error {
	if err := cat.SetDefaultHosts("kv-fetch"); err != nil {
		return err
	}
	return cat.RegisterHint(Provider())
}
