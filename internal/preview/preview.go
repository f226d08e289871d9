package preview

import (
	"io"
	"sync"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Run reads the trace and replays it under base and head, and returns
// their comparison: the figures, the trace's identity, the headline
// deltas, their sensitivity to workers and cache, their interval over
// time windows, and the verdict. A trace row that cannot be read is a
// *TraceError.
func Run(cat *hints.Catalog, base, head Config, trace io.Reader, a Assumptions) (*Report, error) {
	h := newHasher()
	rows, err := ReadTrace(io.TeeReader(trace, h), a.BlockSize)
	if err != nil {
		return nil, err
	}
	// Whatever follows a last line without a newline is read too.
	if _, err := io.Copy(h, trace); err != nil {
		return nil, err
	}
	changed, err := changedHints(cat, base, head)
	if err != nil {
		return nil, err
	}
	rb, rh, err := replayPair(cat, base, head, rows, a)
	if err != nil {
		return nil, err
	}
	r := Compare(base.Name, head.Name, len(rows), a, rb, rh)
	r.Trace = traceInfo(rows, h.Sum(nil))
	r.Headline = headline(rb, rh)
	r.headlineRole = rb.Headline
	r.Interval = interval(rb, rh, r.Trace)
	warnings := unexercised(changed, r.Trace, rb, rh)
	if a.Sensitivity && r.Differs && len(warnings) == 0 {
		for _, v := range []struct {
			name   string
			wf, cf float64
		}{{"1/2x workers", 0.5, 1}, {"2x workers", 2, 1}, {"1/2x cache", 1, 0.5}, {"2x cache", 1, 2}} {
			if a.RecordedChoices && v.wf != 1 {
				continue // the trace names the workers
			}
			vb, vh, err := replayPair(cat, base, head, rows, scaled(a, v.wf, v.cf))
			if err != nil {
				return nil, err
			}
			hd := headline(vb, vh)
			r.Sensitivity = append(r.Sensitivity, Variant{Name: v.name, Workers: v.wf, CacheBlocks: v.cf, Headline: hd, Direction: hd.direction()})
		}
	}
	r.decide(warnings)
	return r, nil
}

// replayPair replays base and head side by side: they share nothing but
// the rows, which they only read.
func replayPair(cat *hints.Catalog, base, head Config, rows []Row, a Assumptions) (*Result, *Result, error) {
	var rb, rh *Result
	var eb, eh error
	var wg sync.WaitGroup
	wg.Go(func() { rb, eb = Replay(cat, base, rows, a) })
	rh, eh = Replay(cat, head, rows, a)
	wg.Wait()
	if eb != nil {
		return nil, nil, eb
	}
	if eh != nil {
		return nil, nil, eh
	}
	return rb, rh, nil
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
		Windows:           DefaultWindows,
		Sensitivity:       true,
	}
}
