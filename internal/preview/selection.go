package preview

import (
	"fmt"
	"math"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// choose models the router's worker choice for one booking of role rs:
// the role's worker selection on the KV path, its router mode elsewhere.
// It returns the worker and, for kvcr, the KV copy it commits.
func (s *sim) choose(rs *roleState, row *Row, hashes []uint64) (*worker, *hints.CommittedCopy, error) {
	ws := rs.workers
	if len(ws) == 0 {
		return nil, nil, fmt.Errorf("role %s has no worker in the topology", rs.name)
	}
	sel := rs.sel
	if rs.mode != hintsconfig.ModeKV {
		sel = modeSelection[rs.mode]
	}
	switch sel {
	case builtin.TypeRoundRobin:
		w := ws[rs.rr%len(ws)]
		rs.rr++
		return w, nil, nil
	case builtin.TypeRandom:
		return ws[rs.rng.IntN(len(ws))], nil, nil
	case builtin.TypePowerOfTwoChoices:
		a, b := ws[rs.rng.IntN(len(ws))], ws[rs.rng.IntN(len(ws))]
		if less(b, a) {
			return b, nil, nil
		}
		return a, nil, nil
	case builtin.TypeLeastLoaded, builtin.TypeDeviceAwareWeighted:
		return leastLoaded(ws), nil, nil
	case builtin.TypeDirect:
		if row.Worker == "" || s.reg[row.Worker] == nil || s.reg[row.Worker].role != rs.name {
			return nil, nil, fmt.Errorf("role %s runs %s, which books the worker the request names; the row names no worker of the role", rs.name, sel)
		}
		return s.reg[row.Worker], nil, nil
	case builtin.TypeTwoTierCostFn:
		return s.twoTier(rs, hashes), nil, nil
	case builtin.TypeDefaultCostFn, builtin.TypeKVCR:
		return s.costFn(rs, row, hashes)
	}
	return nil, nil, fmt.Errorf("role %s: worker selection %q is not modelled (modelled: Dynamo's built-ins and kvcr)", rs.name, sel)
}

// modeSelection is the load-only selection a non-KV router mode books by.
var modeSelection = map[hintsconfig.RouterMode]string{
	hintsconfig.ModeRoundRobin:          builtin.TypeRoundRobin,
	hintsconfig.ModeRandom:              builtin.TypeRandom,
	hintsconfig.ModePowerOfTwo:          builtin.TypePowerOfTwoChoices,
	hintsconfig.ModeLeastLoaded:         builtin.TypeLeastLoaded,
	hintsconfig.ModeDirect:              builtin.TypeDirect,
	hintsconfig.ModeDeviceAwareWeighted: builtin.TypeDeviceAwareWeighted,
}

// less orders workers by load: active requests, then prompt tokens still
// to compute, then index.
func less(a, b *worker) bool {
	if a.activeReqs != b.activeReqs {
		return a.activeReqs < b.activeReqs
	}
	if a.queuedTokens != b.queuedTokens {
		return a.queuedTokens < b.queuedTokens
	}
	return a.idx < b.idx
}

func leastLoaded(ws []*worker) *worker {
	best := ws[0]
	for _, w := range ws[1:] {
		if less(w, best) {
			best = w
		}
	}
	return best
}

// twoTier approximates dynamo-two-tier-cost-fn: when some worker holds at
// least cache_threshold of the prompt, the least loaded of those holding
// the most; otherwise the least loaded.
func (s *sim) twoTier(rs *roleState, hashes []uint64) *worker {
	if len(hashes) == 0 {
		return leastLoaded(rs.workers)
	}
	most := 0
	for _, w := range rs.workers {
		most = max(most, w.cache.peek(hashes))
	}
	if float64(most)/float64(len(hashes)) < rs.params.CacheThreshold || most == 0 {
		return leastLoaded(rs.workers)
	}
	var hot []*worker
	for _, w := range rs.workers {
		if w.cache.peek(hashes) == most {
			hot = append(hot, w)
		}
	}
	return leastLoaded(hot)
}

// costFn is Dynamo's default cost function (lib/kv-router's default
// worker scorer), per worker, in blocks:
//
//	raw_prefill    = (tokens still to prefill + the prompt) / block size
//	decay          = 1 / (1 + overlap_score_credit_decay * excess / prompt blocks),
//	                 excess = (its tokens to prefill - the least any worker has) / block size
//	credit         = overlap_score_credit * decay * cached prefix blocks
//	                 + shared_cache_multiplier * blocks a peer holds beyond them (kvcr)
//	prefill logit  = prefill_load_scale * max(0, raw_prefill - credit) + decode blocks
//	                 + decode_active_request_weight * active requests
//	decode logit   = max(0, decode blocks - credit) + decode_active_request_weight * active requests
//
// where decode blocks are its active blocks plus the prompt's blocks it
// lacks. The lowest logit wins (ties to the lower index); with
// router_temperature above 0 the choice is a softmax draw over the
// negated logits scaled to [-1/T, 0], from the role's seeded generator.
// Under kvcr with shared_cache_multiplier above 0, a booked worker that
// lacks blocks a peer (a worker of any role) holds gets a committed copy
// of them from the peer that holds the most.
func (s *sim) costFn(rs *roleState, row *Row, hashes []uint64) (*worker, *hints.CommittedCopy, error) {
	p := rs.params
	// The cost is in engine blocks: a trace block counts as r of them.
	bs := float64(s.engineBlockSize(row))
	r := float64(s.ratio(row))
	promptBlocks := float64(row.InputTokens) / bs
	kvcr := rs.sel == builtin.TypeKVCR && p.SharedCacheMultiplier > 0
	minQueued := math.MaxInt
	for _, w := range rs.workers {
		minQueued = min(minQueued, w.queuedTokens)
	}
	logits := make([]float64, len(rs.workers))
	overlaps := make([]int, len(rs.workers))
	// kvcr: the longest prefix any worker holds, and the second longest
	// held by another worker, so that each worker's best peer is known
	// after one look at every cache.
	var best, second peerHold
	if kvcr {
		for _, name := range s.roleNames() {
			for _, p := range s.roles[name].workers {
				h := peerHold{p, p.cache.peek(hashes)}
				switch {
				case h.n > best.n:
					best, second = h, best
				case h.n > second.n:
					second = h
				}
			}
		}
	}
	peerOf := func(w *worker) peerHold {
		if best.w == w {
			return second
		}
		return best
	}
	for i, w := range rs.workers {
		ov := w.cache.peek(hashes)
		overlaps[i] = ov
		decay := 1.0
		if p.OverlapScoreCreditDecay > 0 && promptBlocks > 0 {
			excess := float64(w.queuedTokens-minQueued) / bs
			decay = 1 / (1 + p.OverlapScoreCreditDecay*excess/promptBlocks)
		}
		credit := p.OverlapScoreCredit * decay * float64(ov) * r
		if kvcr {
			if peer := peerOf(w); peer.w != nil && peer.n > ov {
				credit += p.SharedCacheMultiplier * float64(peer.n-ov) * r
			}
		}
		decodeBlocks := (float64(w.activeBlocks) + float64(len(hashes)-ov)) * r
		active := p.DecodeActiveRequestWeight * float64(w.activeReqs)
		if rs.name == "decode" {
			logits[i] = math.Max(0, decodeBlocks-credit) + active
			continue
		}
		raw := float64(w.queuedTokens)/bs + promptBlocks
		logits[i] = p.PrefillLoadScale*math.Max(0, raw-credit) + decodeBlocks + active
	}
	pick := 0
	if p.RouterTemperature > 0 && len(logits) > 1 {
		pick = softmaxPick(logits, p.RouterTemperature, rs.rng.Float64())
	} else {
		for i := range logits {
			if logits[i] < logits[pick] {
				pick = i
			}
		}
	}
	w := rs.workers[pick]
	if !kvcr {
		return w, nil, nil
	}
	peer := peerOf(w)
	if peer.w == nil || peer.n <= overlaps[pick] {
		return w, nil, nil
	}
	c := &hints.CommittedCopy{SourceWorker: peer.w.name, BlockHashes: append([]uint64(nil), hashes[overlaps[pick]:peer.n]...)}
	return w, c, nil
}

// peerHold is a worker and the prefix of a prompt it holds, in blocks;
// among workers that hold as much, the first in role then index order.
type peerHold struct {
	w *worker
	n int
}

// softmaxPick draws an index with probability proportional to
// exp(-scaled logit / T), the logits scaled to [0, 1]; u is uniform in
// [0, 1).
func softmaxPick(logits []float64, t, u float64) int {
	lo, hi := logits[0], logits[0]
	for _, l := range logits {
		lo, hi = math.Min(lo, l), math.Max(hi, l)
	}
	weights := make([]float64, len(logits))
	sum := 0.0
	for i, l := range logits {
		x := 0.0
		if hi > lo {
			x = (l - lo) / (hi - lo)
		}
		weights[i] = math.Exp(-x / t)
		sum += weights[i]
	}
	acc := 0.0
	for i, wgt := range weights {
		acc += wgt / sum
		if u < acc {
			return i
		}
	}
	return len(logits) - 1
}
