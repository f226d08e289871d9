package preview

import (
	"io"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Run reads the trace and replays it under base and head, and returns
// their comparison. A trace row that cannot be read is a *TraceError.
func Run(cat *hints.Catalog, base, head Config, trace io.Reader, a Assumptions) (*Report, error) {
	rows, err := ReadTrace(trace, a.BlockSize)
	if err != nil {
		return nil, err
	}
	rb, err := Replay(cat, base, rows, a)
	if err != nil {
		return nil, err
	}
	rh, err := Replay(cat, head, rows, a)
	if err != nil {
		return nil, err
	}
	return Compare(base.Name, head.Name, len(rows), a, rb, rh), nil
}

// DefaultAssumptions are the model's defaults.
func DefaultAssumptions() Assumptions {
	return Assumptions{
		BlockSize:         DefaultBlockSize,
		Topology:          Topology{Default: RoleTopology{Workers: DefaultWorkers, CacheBlocks: DefaultCacheBlocks}},
		PrefillMSPerToken: DefaultPrefillMSPerToken,
		FetchMSPerBlock:   DefaultFetchMSPerBlock,
		DecodeMSPerToken:  DefaultDecodeMSPerToken,
		Seed:              DefaultSeed,
	}
}
