package builtin

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

type kvEvictParams struct{}

func kvEvictProvider() hints.HintProvider {
	evict := staticAction(hints.ActionKVEvict, "1.0", func(w *hints.ObjectWriter) {
		w.Uint64s("block_hashes", nil)
		w.String("execute_at", "request_completion")
		w.Bool("include_current_request", true)
	})
	return hints.HintProvider{
		Type:         TypeKVEvict,
		DefaultHosts: []hints.HintHost{hints.AnyWorkerSelection},
		Description:  "kv.evict@1.0: free a session's blocks when its final turn completes",
		NeverBlocks:  true,
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			if err := hints.DecodeParams(raw, &kvEvictParams{}); err != nil {
				return nil, err
			}
			return kvEvict(evict), nil
		},
	}
}

type kvEvict []hints.Action

// BuildHints evicts a session's blocks on its final turn.
func (e kvEvict) BuildHints(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
	if hc.Session.ID == "" || !hc.Session.Final {
		return nil, nil
	}
	return e, nil
}
