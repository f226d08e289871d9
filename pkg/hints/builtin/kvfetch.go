package builtin

import (
	"context"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// kvFetchParams are the parameters of kv-fetch.
type kvFetchParams struct {
	// MinBlocks skips copies of fewer blocks: a tiny copy costs more to
	// arrange than to recompute.
	MinBlocks int `json:"min_blocks"`
	// MaxBlocks sends at most this many blocks, the first of the prompt; 0 sends all.
	MaxBlocks int `json:"max_blocks"`
}

const maxBlocksLimit = 1 << 20

func kvFetchProvider() hints.HintProvider {
	return hints.HintProvider{
		Type:         TypeKVFetch,
		Commitments:  hints.KVCopy,
		DefaultHosts: []hints.HintHost{hints.WorkerSelection(TypeKVCR)},
		Description:  "kv.fetch@1.0: pull the committed KV copy's blocks from the source worker; nothing for a copy without a source endpoint",
		NeverBlocks:  true,
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := kvFetchParams{MinBlocks: 1}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("min_blocks", int64(p.MinBlocks), 1, maxBlocksLimit); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("max_blocks", int64(p.MaxBlocks), 0, maxBlocksLimit); err != nil {
				return nil, err
			}
			if p.MaxBlocks != 0 && p.MaxBlocks < p.MinBlocks {
				return nil, hints.ParamErrorf("max_blocks", "%d is below min_blocks %d; no copy could be sent", p.MaxBlocks, p.MinBlocks)
			}
			return &kvFetch{params: p}, nil
		},
	}
}

type kvFetch struct{ params kvFetchParams }

func (f *kvFetch) EffectiveParameters() any { return f.params }

// BuildHints sends the committed copy as one kv.fetch. It sends nothing when
// there is no copy, when the copy is smaller than min_blocks, or when the
// copy has no source control endpoint (neither the booking nor the source
// worker's advertisement gave one): the KV connector refuses an empty fetch
// and a fetch that does not say where to fetch from, and it would refuse
// the whole hint with it. The booked worker then computes those blocks
// itself. A copy from outside a booked worker's required topology domain
// never reaches it: the dispatcher drops it first (dispatch.TopologyWorker).
func (f *kvFetch) BuildHints(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
	cp := hc.CommittedKVCopy()
	if cp == nil || cp.SourceEndpoint == "" || len(cp.BlockHashes) < f.params.MinBlocks || len(cp.BlockHashes) == 0 {
		return nil, nil
	}
	blocks := cp.BlockHashes
	if f.params.MaxBlocks > 0 && len(blocks) > f.params.MaxBlocks {
		blocks = blocks[:f.params.MaxBlocks]
	}
	// 20 digits and a comma per hash, the keys, and the endpoint.
	w := hc.PayloadWriter(64 + 21*len(blocks) + len(cp.SourceEndpoint))
	w.Uint64s("block_hashes", blocks)
	w.String("source_control_endpoint", cp.SourceEndpoint)
	p, err := hc.ClosePayload(&w)
	if err != nil {
		return nil, err
	}
	// One action in memory the booking lends: with its payload in the
	// arena, a fetch allocates nothing of its own.
	return append(hc.Actions(1), hints.Action{Type: hints.ActionKVFetch, Version: "1.0", Payload: p}), nil
}
