// Package builtin holds the hint and worker-selection policies that every
// kvhint build links.
//
// Hint policies: kv-fetch (sends the committed KV copy as kv.fetch),
// kv-retain (kv.retain on a session's non-final turns) and kv-evict
// (kv.evict on a session's final turn).
//
// Worker-selection policies, Dynamo's with Dynamo's names, parameters,
// defaults and bounds:
//
//   - dynamo-default-cost-fn: cached prompt blocks against load; takes
//     overlap_score_credit, overlap_score_credit_decay, prefill_load_scale,
//     decode_active_request_weight, host_cache_hit_weight,
//     disk_cache_hit_weight, shared_cache_multiplier (in [0,1]),
//     router_temperature and seed. Never commits KV copies.
//   - dynamo-two-tier-cost-fn: takes cache_threshold,
//     balance_abs_threshold, balance_rel_threshold and adaptive. Never
//     commits KV copies.
//   - dynamo-round-robin, dynamo-random, dynamo-power-of-two-choices,
//     dynamo-least-loaded, dynamo-direct, dynamo-device-aware-weighted:
//     load only, no parameters at all.
//   - dynamo-soft-affinity-load-guard: keeps a session's soft binding on
//     its worker while that worker holds at most max_active_requests
//     (default 32); past that, moves it only to a worker with at least
//     move_margin (default 2, at least 1) fewer. Load only, never commits
//     KV copies; Dynamo's stock builds link it.
//
// And this product's own:
//
//   - kvcr: KV cache reuse, with dynamo-default-cost-fn's parameters but a
//     shared_cache_multiplier of 0.5 by default; it commits KV copies when
//     shared_cache_multiplier is above 0, and kv-fetch runs under it by
//     default to send them.
//
// Dynamo fills a cost parameter that is left out from the router's own
// flags, so the selections report (hints.ParameterReporter) only the keys
// that were set; kvcr adds its effective shared_cache_multiplier, on which
// its committing copies depends.
package builtin

import (
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Hint policy types.
const (
	TypeKVFetch  = "kv-fetch"
	TypeKVRetain = "kv-retain"
	TypeKVEvict  = "kv-evict"
)

// Worker-selection policy types: Dynamo's, then this product's kvcr.
const (
	TypeDefaultCostFn         = "dynamo-default-cost-fn"
	TypeTwoTierCostFn         = "dynamo-two-tier-cost-fn"
	TypeRoundRobin            = "dynamo-round-robin"
	TypeRandom                = "dynamo-random"
	TypePowerOfTwoChoices     = "dynamo-power-of-two-choices"
	TypeLeastLoaded           = "dynamo-least-loaded"
	TypeDirect                = "dynamo-direct"
	TypeDeviceAwareWeighted   = "dynamo-device-aware-weighted"
	TypeSoftAffinityLoadGuard = "dynamo-soft-affinity-load-guard"
	TypeKVCR                  = "kvcr"
)

// Register adds the built-in policies to cat.
//
// Worker-selection policies are registered, and so listed, in this order:
// Dynamo's KV-aware ones (dynamo-default-cost-fn, then
// dynamo-two-tier-cost-fn), Dynamo's load-only ones in the order of the
// router modes they match (round-robin, random, power-of-two-choices,
// least-loaded, direct, device-aware-weighted),
// dynamo-soft-affinity-load-guard, and last kvcr, which is
// this product's and not Dynamo's. Hint policies are registered in the
// order their defaults run: fetch, retain, evict.
func Register(cat *hints.Catalog) error {
	sels := []hints.SelectionProvider{costFnProvider(), twoTierProvider()}
	sels = append(sels, loadOnlyProviders()...)
	sels = append(sels, softAffinityProvider(), kvcrProvider())
	for _, p := range sels {
		if err := cat.RegisterSelection(p); err != nil {
			return err
		}
	}
	for _, p := range []hints.HintProvider{kvFetchProvider(), kvRetainProvider(), kvEvictProvider()} {
		if err := cat.RegisterHint(p); err != nil {
			return err
		}
	}
	return nil
}

// NewCatalog returns a catalog holding the built-in policies, ready for a
// custom build to register more.
func NewCatalog() *hints.Catalog {
	cat := hints.NewCatalog()
	if err := Register(cat); err != nil {
		panic(fmt.Sprintf("builtin: %v", err))
	}
	return cat
}

// staticAction builds a precomputed action list that a policy returns as it is
// on every booking; the dispatcher never modifies what policies return.
func staticAction(typ, version string, write func(w *hints.ObjectWriter)) []hints.Action {
	var w hints.ObjectWriter
	write(&w)
	p, err := w.Payload()
	if err != nil {
		panic(fmt.Sprintf("builtin: %s payload: %v", typ, err))
	}
	return []hints.Action{{Type: typ, Version: version, Payload: p}}
}
