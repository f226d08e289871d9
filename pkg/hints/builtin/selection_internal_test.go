package builtin

import (
	"math"
	"strings"
	"testing"
)

// TestSelectionChecksRefuseNonFinite: JSON cannot carry NaN or an
// infinity, but the bounds checks do not rely on that; a value that
// reaches them by any other path is refused naming its key.
func TestSelectionChecksRefuseNonFinite(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	nonFinite := map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)}
	type check struct {
		key string
		run func(v float64) error
	}
	checks := []check{
		{"overlap_score_credit", func(v float64) error { return (&costParams{OverlapScoreCredit: f(v)}).check(false) }},
		{"overlap_score_credit_decay", func(v float64) error { return (&costParams{OverlapScoreCreditDecay: f(v)}).check(false) }},
		{"prefill_load_scale", func(v float64) error { return (&costParams{PrefillLoadScale: f(v)}).check(false) }},
		{"decode_active_request_weight", func(v float64) error { return (&costParams{DecodeActiveRequestWeight: f(v)}).check(false) }},
		{"host_cache_hit_weight", func(v float64) error { return (&costParams{HostCacheHitWeight: f(v)}).check(false) }},
		{"disk_cache_hit_weight", func(v float64) error { return (&costParams{DiskCacheHitWeight: f(v)}).check(false) }},
		{"shared_cache_multiplier", func(v float64) error { return (&costParams{SharedCacheMultiplier: f(v)}).check(false) }},
		{"shared_cache_multiplier", func(v float64) error { return (&costParams{SharedCacheMultiplier: f(v)}).check(true) }},
		{"router_temperature", func(v float64) error { return (&costParams{RouterTemperature: f(v)}).check(false) }},
		{"cache_threshold", func(v float64) error { return (&twoTierParams{CacheThreshold: f(v)}).check() }},
		{"balance_rel_threshold", func(v float64) error { return (&twoTierParams{BalanceRelThreshold: f(v)}).check() }},
		{"adaptive.load_scale", func(v float64) error {
			return (&twoTierParams{Adaptive: &twoTierAdaptive{LoadScale: f(v)}}).check()
		}},
	}
	for _, c := range checks {
		for name, v := range nonFinite {
			t.Run(c.key+" "+name, func(t *testing.T) {
				err := c.run(v)
				want := `parameter "` + c.key + `": ` + name + " is not a finite number"
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("check = %v, want %q", err, want)
				}
			})
		}
	}
}
