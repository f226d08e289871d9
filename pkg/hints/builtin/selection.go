package builtin

import (
	"fmt"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// The worker-selection policies are Dynamo's own, with Dynamo's names,
// parameters, defaults and bounds, plus kvcr. Their parameters are as strict
// as Dynamo's: an unknown key, a value of the wrong type, and a value out of
// bounds are refused naming the key, so that a file the rules accept is one
// the router accepts too.
//
// kv-hint-operator does not choose workers: the router does. What a parsed
// selection policy tells the rules is whether it commits KV copies, and
// what it reports as its parameters is what the compiled file hands the
// router.

// costParams are the parameters of dynamo-default-cost-fn, and of kvcr,
// which takes the same ones. Every field is a pointer: a key left out stays
// nil. Dynamo fills an unset value from the router's own configuration (its
// command-line flags), so a policy reports only the keys that were set; a
// default written into the compiled file would override the router's flag.
// The defaults quoted below are those of the router's configuration.
//
// Every value must be a finite number and not negative.
type costParams struct {
	// OverlapScoreCredit is the credit a worker earns for the prompt
	// blocks it already holds, weighed against its load. Dynamo default 1.0.
	OverlapScoreCredit *float64 `json:"overlap_score_credit,omitempty" params:"option"`
	// OverlapScoreCreditDecay is the decay Dynamo applies to that credit;
	// 0 applies none. Dynamo default 0.
	OverlapScoreCreditDecay *float64 `json:"overlap_score_credit_decay,omitempty" params:"option"`
	// PrefillLoadScale scales the prefill work a worker still has to do in
	// its cost. Dynamo default 1.0.
	PrefillLoadScale *float64 `json:"prefill_load_scale,omitempty" params:"option"`
	// DecodeActiveRequestWeight adds a cost per request a worker is
	// decoding. Dynamo default 0.
	DecodeActiveRequestWeight *float64 `json:"decode_active_request_weight,omitempty" params:"option"`
	// HostCacheHitWeight is what a block held in a worker's host memory is
	// worth, against one in device memory. Dynamo default 0.75.
	HostCacheHitWeight *float64 `json:"host_cache_hit_weight,omitempty" params:"option"`
	// DiskCacheHitWeight is what a block held on a worker's disk is worth.
	// Dynamo default 0.25.
	DiskCacheHitWeight *float64 `json:"disk_cache_hit_weight,omitempty" params:"option"`
	// SharedCacheMultiplier is what a block held in a cache shared between
	// workers is worth; not negative, and in [0, 1] for kvcr (above 1 is
	// warned for dynamo-default-cost-fn, whose provider takes it). Dynamo
	// default 0 (0.5 when the router runs with a shared cache); kvcr's
	// default is 0.5.
	SharedCacheMultiplier *float64 `json:"shared_cache_multiplier,omitempty" params:"option"`
	// RouterTemperature softens the choice between workers of similar
	// cost; 0 always takes the cheapest. Dynamo default 0.
	RouterTemperature *float64 `json:"router_temperature,omitempty" params:"option"`
	// Seed seeds the random draw that a temperature above 0 makes; an
	// unsigned 64-bit integer.
	Seed *uint64 `json:"seed,omitempty" params:"option"`
}

// Keys of costParams, in the order they are checked.
const (
	keyOverlapScoreCredit        = "overlap_score_credit"
	keyOverlapScoreCreditDecay   = "overlap_score_credit_decay"
	keyPrefillLoadScale          = "prefill_load_scale"
	keyDecodeActiveRequestWeight = "decode_active_request_weight"
	keyHostCacheHitWeight        = "host_cache_hit_weight"
	keyDiskCacheHitWeight        = "disk_cache_hit_weight"
	keySharedCacheMultiplier     = "shared_cache_multiplier"
	keyRouterTemperature         = "router_temperature"
)

// check holds the values that were set to Dynamo's bounds: each finite and
// not negative (default/parameters.rs), and, where capped (kvcr),
// shared_cache_multiplier at most 1. Dynamo's own provider does not cap
// it: the [0,1] bound is on KvRouterConfig's field and the per-request
// override, so dynamo-default-cost-fn only warns above 1. Values decoded
// from JSON are always finite; the check does not rely on it.
func (p *costParams) check(capShared bool) error {
	for _, f := range []struct {
		key string
		v   *float64
	}{
		{keyOverlapScoreCredit, p.OverlapScoreCredit},
		{keyOverlapScoreCreditDecay, p.OverlapScoreCreditDecay},
		{keyPrefillLoadScale, p.PrefillLoadScale},
		{keyDecodeActiveRequestWeight, p.DecodeActiveRequestWeight},
		{keyHostCacheHitWeight, p.HostCacheHitWeight},
		{keyDiskCacheHitWeight, p.DiskCacheHitWeight},
		{keyRouterTemperature, p.RouterTemperature},
	} {
		if f.v == nil {
			continue
		}
		if err := hints.FloatAtLeast(f.key, *f.v, 0); err != nil {
			return err
		}
	}
	if p.SharedCacheMultiplier == nil {
		return nil
	}
	if capShared {
		return hints.FloatInRange(keySharedCacheMultiplier, *p.SharedCacheMultiplier, 0, 1)
	}
	return hints.FloatAtLeast(keySharedCacheMultiplier, *p.SharedCacheMultiplier, 0)
}

func parseCostParams(raw hints.Params, capShared bool) (costParams, error) {
	var p costParams
	if err := hints.DecodeParams(raw, &p); err != nil {
		return p, err
	}
	return p, p.check(capShared)
}

// costFn is a parsed dynamo-default-cost-fn. It never commits KV copies,
// whatever shared_cache_multiplier says: it only weighs the blocks a shared
// cache holds.
type costFn struct{ set costParams }

func (c *costFn) CommitsKVCopies() bool { return false }

// EffectiveParameters reports the keys that were set and nothing else: the
// router fills the others from its flags.
func (c *costFn) EffectiveParameters() any { return c.set }

// ParameterWarnings flags a shared_cache_multiplier above 1: Dynamo's
// provider takes it, but it counts a block in the shared cache above one
// already on the device, which the router's own setting (bounded to
// [0,1]) never does.
func (c *costFn) ParameterWarnings() []*hints.ParamError {
	if v := c.set.SharedCacheMultiplier; v != nil && *v > 1 {
		return []*hints.ParamError{{Key: keySharedCacheMultiplier, Message: fmt.Sprintf(
			"%g is above 1: a block in the shared cache then counts for more than one on the device; Dynamo accepts it (its provider checks finite and >= 0), "+
				"but its router setting and the per-request override are bounded to [0,1]", *v)}}
	}
	return nil
}

func costFnProvider() hints.SelectionProvider {
	return hints.SelectionProvider{
		Type: TypeDefaultCostFn,
		Description: "Dynamo's default cost: cached prompt blocks against load; never commits KV copies. " +
			"Unset parameters take the router's flags (defaults overlap_score_credit 1.0, overlap_score_credit_decay 0, " +
			"prefill_load_scale 1.0, decode_active_request_weight 0, host_cache_hit_weight 0.75, disk_cache_hit_weight 0.25, " +
			"shared_cache_multiplier 0 (finite >= 0; above 1 is warned), router_temperature 0; seed)",
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			p, err := parseCostParams(raw, false)
			if err != nil {
				return nil, err
			}
			return &costFn{set: p}, nil
		},
	}
}

// kvcrSharedCacheMultiplier is kvcr's shared_cache_multiplier when none is
// set: kvcr exists to reuse peers' blocks, so it commits copies by default.
const kvcrSharedCacheMultiplier = 0.5

// kvcr is a parsed kvcr: KV cache reuse. It takes dynamo-default-cost-fn's
// parameters; above 0, shared_cache_multiplier makes it book a worker that
// lacks blocks a peer holds and commit a copy of them to it, which a hint
// policy (kv-fetch by default) sends.
type kvcr struct {
	set    costParams
	shared float64
}

func (k *kvcr) CommitsKVCopies() bool { return k.shared > 0 }

// EffectiveParameters reports the keys that were set, and
// shared_cache_multiplier always: whether the policy commits copies
// follows from it, and the compiled file must show that decision.
func (k *kvcr) EffectiveParameters() any {
	p := k.set
	shared := k.shared
	p.SharedCacheMultiplier = &shared
	return p
}

func kvcrProvider() hints.SelectionProvider {
	return hints.SelectionProvider{
		Type: TypeKVCR,
		Description: "KV cache reuse: dynamo-default-cost-fn's parameters, with shared_cache_multiplier " +
			"defaulting to 0.5 (in [0,1]); commits KV copies when shared_cache_multiplier > 0",
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			p, err := parseCostParams(raw, true)
			if err != nil {
				return nil, err
			}
			k := &kvcr{set: p, shared: kvcrSharedCacheMultiplier}
			if p.SharedCacheMultiplier != nil {
				k.shared = *p.SharedCacheMultiplier
			}
			return k, nil
		},
	}
}

// Defaults of dynamo-two-tier-cost-fn, as Dynamo sets them.
const (
	twoTierCacheThreshold      = 0.5
	twoTierBalanceAbsThreshold = 32
	twoTierBalanceRelThreshold = 1.1
	twoTierUpdateIntervalMS    = 100
	twoTierLoadScale           = 32.0
)

// twoTierParams are the parameters of dynamo-two-tier-cost-fn. As with
// costParams, a key left out stays nil and is not reported, so the compiled
// file carries only what the user wrote.
type twoTierParams struct {
	// CacheThreshold is the cache-hit threshold of the first tier, a share
	// of the prompt; in [0, 1]. Dynamo default 0.5.
	CacheThreshold *float64 `json:"cache_threshold,omitempty"`
	// BalanceAbsThreshold is the absolute load-imbalance threshold of the
	// balance tier; a non-negative integer. Dynamo default 32.
	BalanceAbsThreshold *uint64 `json:"balance_abs_threshold,omitempty"`
	// BalanceRelThreshold is the relative load-imbalance threshold of the
	// balance tier, a ratio; at least 1. Dynamo default 1.1.
	BalanceRelThreshold *float64 `json:"balance_rel_threshold,omitempty"`
	// Adaptive, when given (even as an empty mapping), turns on Dynamo's
	// adaptive mode with these settings. It cannot be combined with
	// thresholds other than the defaults.
	Adaptive *twoTierAdaptive `json:"adaptive,omitempty" params:"option"`
}

// twoTierAdaptive is the adaptive mapping of dynamo-two-tier-cost-fn.
type twoTierAdaptive struct {
	// UpdateIntervalMS is how often adaptive mode updates, in
	// milliseconds; above 0. Dynamo default 100.
	UpdateIntervalMS *uint64 `json:"update_interval_ms,omitempty"`
	// LoadScale is adaptive mode's load scale; at least 1. Dynamo default
	// 32.0.
	LoadScale *float64 `json:"load_scale,omitempty"`
}

// Keys of twoTierParams.
const (
	keyCacheThreshold      = "cache_threshold"
	keyBalanceAbsThreshold = "balance_abs_threshold"
	keyBalanceRelThreshold = "balance_rel_threshold"
	keyAdaptive            = "adaptive"
	keyUpdateIntervalMS    = "adaptive.update_interval_ms"
	keyLoadScale           = "adaptive.load_scale"
)

// check holds the values that were set to Dynamo's bounds, and refuses
// adaptive beside a threshold set to anything but its default, naming the
// thresholds.
func (p *twoTierParams) check() error {
	if p.CacheThreshold != nil {
		if err := hints.FloatInRange(keyCacheThreshold, *p.CacheThreshold, 0, 1); err != nil {
			return err
		}
	}
	if p.BalanceRelThreshold != nil {
		if err := hints.FloatAtLeast(keyBalanceRelThreshold, *p.BalanceRelThreshold, 1); err != nil {
			return err
		}
	}
	if p.Adaptive == nil {
		return nil
	}
	if v := p.Adaptive.UpdateIntervalMS; v != nil && *v == 0 {
		return hints.ParamErrorf(keyUpdateIntervalMS, "0 is out of range: the interval must be above 0")
	}
	if v := p.Adaptive.LoadScale; v != nil {
		if err := hints.FloatAtLeast(keyLoadScale, *v, 1); err != nil {
			return err
		}
	}
	var changed []string
	if v := p.CacheThreshold; v != nil && *v != twoTierCacheThreshold {
		changed = append(changed, fmt.Sprintf("%s %g (default %g)", keyCacheThreshold, *v, twoTierCacheThreshold))
	}
	if v := p.BalanceAbsThreshold; v != nil && *v != twoTierBalanceAbsThreshold {
		changed = append(changed, fmt.Sprintf("%s %d (default %d)", keyBalanceAbsThreshold, *v, twoTierBalanceAbsThreshold))
	}
	if v := p.BalanceRelThreshold; v != nil && *v != twoTierBalanceRelThreshold {
		changed = append(changed, fmt.Sprintf("%s %g (default %g)", keyBalanceRelThreshold, *v, twoTierBalanceRelThreshold))
	}
	if len(changed) > 0 {
		return hints.ParamErrorf(keyAdaptive, "cannot be combined with non-default thresholds: %s; leave them out or at their defaults, or drop adaptive",
			strings.Join(changed, ", "))
	}
	return nil
}

// twoTier is a parsed dynamo-two-tier-cost-fn. It never commits KV copies.
type twoTier struct{ set twoTierParams }

func (t *twoTier) CommitsKVCopies() bool { return false }

// EffectiveParameters reports the keys that were set and nothing else.
func (t *twoTier) EffectiveParameters() any { return t.set }

func twoTierProvider() hints.SelectionProvider {
	return hints.SelectionProvider{
		Type: TypeTwoTierCostFn,
		Description: "Dynamo's two-tier cost: a cache tier and a balance tier; never commits KV copies " +
			"(cache_threshold 0.5 in [0,1], balance_abs_threshold 32, balance_rel_threshold 1.1 >= 1, " +
			"adaptive {update_interval_ms 100 > 0, load_scale 32.0 >= 1}, only with default thresholds)",
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			var p twoTierParams
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := p.check(); err != nil {
				return nil, err
			}
			return &twoTier{set: p}, nil
		},
	}
}

// Defaults of dynamo-soft-affinity-load-guard, as Dynamo sets them
// (lib/router-plugins/builtin/src/soft_affinity_load_guard.rs).
const (
	softAffinityMaxActiveRequests = 32
	softAffinityMoveMargin        = 2
)

// softAffinityParams are the parameters of dynamo-soft-affinity-load-guard,
// both integers (Rust usize, so up to 2^64-1) and optional. As with the cost
// parameters, a key left out stays nil and is not reported, so the
// compiled file carries only what the user wrote; the router applies its
// own defaults to the rest.
type softAffinityParams struct {
	// MaxActiveRequests is how many active requests the bound worker may
	// hold, inclusive, before the binding may move. Dynamo default 32.
	MaxActiveRequests *uint64 `json:"max_active_requests,omitempty"`
	// MoveMargin is how many fewer active requests another worker must
	// hold before the binding moves to it; at least 1 (0 would move on an
	// equal load). Dynamo default 2.
	MoveMargin *uint64 `json:"move_margin,omitempty"`
}

// keyMoveMargin is the key Dynamo bounds below.
const keyMoveMargin = "move_margin"

// softAffinity is a parsed dynamo-soft-affinity-load-guard: it keeps a
// session's soft binding on its worker until that worker's load passes a
// guard. It looks at load alone and never commits KV copies.
type softAffinity struct{ set softAffinityParams }

func (s *softAffinity) CommitsKVCopies() bool { return false }

// EffectiveParameters reports the keys that were set and nothing else.
func (s *softAffinity) EffectiveParameters() any { return s.set }

func softAffinityProvider() hints.SelectionProvider {
	return hints.SelectionProvider{
		Type: TypeSoftAffinityLoadGuard,
		Description: fmt.Sprintf("Dynamo's soft-affinity load guard: keeps a session on its bound worker until that worker holds more than "+
			"max_active_requests (default %d), then moves it only to a worker with at least move_margin (default %d, >= 1) fewer; "+
			"load only, never commits KV copies", softAffinityMaxActiveRequests, softAffinityMoveMargin),
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			var p softAffinityParams
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if p.MoveMargin != nil && *p.MoveMargin < 1 {
				return nil, hints.ParamErrorf(keyMoveMargin, "%d is below the minimum 1", *p.MoveMargin)
			}
			return &softAffinity{set: p}, nil
		},
	}
}

// loadOnly is a selection that looks at load alone, takes no parameters and
// never commits copies.
type loadOnly struct{}

func (loadOnly) CommitsKVCopies() bool { return false }

// loadOnlyProviders returns Dynamo's load-only selections in the order of
// the router modes they match.
func loadOnlyProviders() []hints.SelectionProvider {
	var out []hints.SelectionProvider
	for _, t := range []struct{ typ, desc string }{
		{TypeRoundRobin, "takes the workers in turn; load only, no parameters"},
		{TypeRandom, "picks a worker at random; load only, no parameters"},
		{TypePowerOfTwoChoices, "the less loaded of two workers picked at random; load only, no parameters"},
		{TypeLeastLoaded, "the least-loaded worker; load only, no parameters"},
		{TypeDirect, "the worker the request names; no parameters"},
		{TypeDeviceAwareWeighted, "load weighted by each worker's device; no parameters"},
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
