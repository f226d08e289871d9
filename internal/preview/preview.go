package preview

import (
	"io"
	"sync"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Run reads the trace and replays it under base and head, and returns
// their comparison. A trace row that cannot be read is a *TraceError.
func Run(cat *hints.Catalog, base, head Config, trace io.Reader, a Assumptions) (*Report, error) {
	rows, err := ReadTrace(trace, a.BlockSize)
	if err != nil {
		return nil, err
	}
	// The two replays share nothing but the rows, which they only read:
	// they run side by side.
	var rb, rh *Result
	var eb, eh error
	var wg sync.WaitGroup
	wg.Go(func() { rb, eb = Replay(cat, base, rows, a) })
	rh, eh = Replay(cat, head, rows, a)
	wg.Wait()
	if eb != nil {
		return nil, eb
	}
	if eh != nil {
		return nil, eh
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
		EvictInUse:        DefaultEvictInUse,
	}
}
