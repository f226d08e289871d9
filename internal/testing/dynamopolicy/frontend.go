package dynamopolicy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Frontend is the build and the flags of a released Dynamo Frontend, as
// far as its start-up checks of the policy file need them.
type Frontend struct {
	// RouterMode is --router-mode; empty is kv.
	RouterMode string
	// SelectionTypes are the worker-selection types its build links
	// beyond the stock ones (a declared catalog's).
	SelectionTypes []string
	// HintPolicyTypes and RequestClassifiers are the KV-hint policy and
	// request classifier types its build registers; no stock catalog
	// registers any.
	HintPolicyTypes    []string
	RequestClassifiers []string
}

// stockTypes are the worker-selection types of Dynamo's stock catalog.
var stockTypes = []string{
	"dynamo-default-cost-fn", "dynamo-two-tier-cost-fn", "dynamo-soft-affinity-load-guard",
	"dynamo-round-robin", "dynamo-random", "dynamo-power-of-two-choices",
	"dynamo-least-loaded", "dynamo-direct", "dynamo-device-aware-weighted",
}

// CheckFrontend reads a policy file as a released Dynamo Frontend f
// starts on it: the parse of CheckReleased, then the start-up checks of
// the registry (plugins/registry.rs) and the bindings: the selected
// instances (the roles, default dropped) must be of linked types and, off
// kv mode, there must be none; each selected instance's provider parses
// its parameters; kv_hint_policy and request_classifier must be linked.
// Instances no role selects are never resolved.
func CheckFrontend(doc []byte, f Frontend) error {
	r, err := parseReleased(doc)
	if err != nil {
		return err
	}
	linked := append(append([]string(nil), stockTypes...), f.SelectionTypes...)
	for _, stage := range []string{"aggregated", "prefill", "decode", "encode"} {
		name, ok := r.roles[stage]
		if !ok || name == "default" {
			continue
		}
		if f.RouterMode != "" && f.RouterMode != "kv" {
			return errors.New("linked worker-selection policies require --router-mode kv")
		}
		inst := r.instances[name]
		if !slices.Contains(linked, inst.typ) {
			return fmt.Errorf("unknown worker-selection policy type %q; linked policy types: %s", inst.typ, strings.Join(linked, ", "))
		}
		if err := stockParameters(inst.typ, inst.params); err != nil {
			return fmt.Errorf("worker_selection instance %q (%s): %w", name, inst.typ, err)
		}
	}
	if p := r.hintPolicy; p != nil && !slices.Contains(f.HintPolicyTypes, p.typ) {
		return fmt.Errorf("unknown KV-hint policy type %q: not linked into this build", p.typ)
	}
	if c := r.classifier; c != nil && !slices.Contains(f.RequestClassifiers, c.typ) {
		return fmt.Errorf("unknown request classifier type %q: not linked into this build", c.typ)
	}
	return nil
}

// stockParameters is what each stock provider checks of its parameters
// (lib/router-plugins/builtin): deny_unknown_fields, each field of its
// Rust type, and the provider's bounds. A type that is not stock is left
// to its own build.
func stockParameters(typ string, p *node) error {
	switch typ {
	case "dynamo-default-cost-fn":
		// default/parameters.rs: eight Option<f64>, finite and >= 0; seed Option<u64>.
		keys := []string{"overlap_score_credit", "overlap_score_credit_decay", "prefill_load_scale", "decode_active_request_weight",
			"host_cache_hit_weight", "disk_cache_hit_weight", "shared_cache_multiplier", "router_temperature", "seed"}
		m, err := fields(p, "struct DefaultCostParameters", keys...)
		if err != nil {
			return err
		}
		for _, k := range keys[:8] {
			if n, ok := set(m, k); ok {
				v, err := asFloat(n)
				if err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					return fmt.Errorf("%s must be finite and >= 0", k)
				}
			}
		}
		if n, ok := set(m, "seed"); ok {
			if _, err := asUint(n, "u64"); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
	case "dynamo-two-tier-cost-fn":
		m, err := fields(p, "struct TwoTierParameters", "cache_threshold", "balance_abs_threshold", "balance_rel_threshold", "adaptive")
		if err != nil {
			return err
		}
		cache, abs, rel := 0.5, uint64(32), 1.1
		if n, ok := m["cache_threshold"]; ok {
			if cache, err = asFloat(n); err != nil {
				return fmt.Errorf("cache_threshold: %w", err)
			}
			if math.IsNaN(cache) || cache < 0 || cache > 1 {
				return errors.New("cache_threshold must be in [0, 1]")
			}
		}
		if n, ok := m["balance_abs_threshold"]; ok {
			v, err := asUint(n, "usize")
			if err != nil {
				return fmt.Errorf("balance_abs_threshold: %w", err)
			}
			abs = v.Uint64()
		}
		if n, ok := m["balance_rel_threshold"]; ok {
			if rel, err = asFloat(n); err != nil {
				return fmt.Errorf("balance_rel_threshold: %w", err)
			}
			if math.IsNaN(rel) || math.IsInf(rel, 0) || rel < 1 {
				return errors.New("balance_rel_threshold must be finite and >= 1")
			}
		}
		if a, ok := set(m, "adaptive"); ok {
			am, err := fields(a, "struct AdaptiveParameters", "update_interval_ms", "load_scale")
			if err != nil {
				return fmt.Errorf("adaptive: %w", err)
			}
			if n, ok := am["update_interval_ms"]; ok {
				v, err := asUint(n, "u64")
				if err != nil {
					return fmt.Errorf("adaptive.update_interval_ms: %w", err)
				}
				if v.Sign() == 0 {
					return errors.New("adaptive.update_interval_ms must be > 0")
				}
			}
			if n, ok := am["load_scale"]; ok {
				v, err := asFloat(n)
				if err != nil {
					return fmt.Errorf("adaptive.load_scale: %w", err)
				}
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 1 {
					return errors.New("adaptive.load_scale must be finite and >= 1")
				}
			}
			if cache != 0.5 || abs != 32 || rel != 1.1 {
				return errors.New("adaptive cannot be combined with non-default thresholds")
			}
		}
	case "dynamo-soft-affinity-load-guard":
		m, err := fields(p, "struct SoftAffinityLoadGuardParameters", "max_active_requests", "move_margin")
		if err != nil {
			return err
		}
		if n, ok := m["max_active_requests"]; ok {
			if _, err := asUint(n, "usize"); err != nil {
				return fmt.Errorf("max_active_requests: %w", err)
			}
		}
		if n, ok := m["move_margin"]; ok {
			v, err := asUint(n, "usize")
			if err != nil {
				return fmt.Errorf("move_margin: %w", err)
			}
			if v.Sign() == 0 {
				return errors.New("move_margin must be at least 1")
			}
		}
	case "dynamo-round-robin", "dynamo-random", "dynamo-power-of-two-choices", "dynamo-least-loaded", "dynamo-direct", "dynamo-device-aware-weighted":
		// non_kv.rs: no parameters.
		if _, err := fields(p, "struct NoParameters"); err != nil {
			return err
		}
	}
	return nil
}
