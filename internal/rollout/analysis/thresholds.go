package analysis

import (
	"errors"
	"fmt"
	"math"
)

// Thresholds are the limits a measurement is judged by. A metric fails
// when its difference is both significant (one-sided p below Significance,
// in the harmful direction) and beyond its threshold: the threshold keeps
// a tiny but significant change from failing a rollout, the test keeps a
// large but noisy one from failing it. The RouterRollout's analysis
// fields map onto it one to one.
type Thresholds struct {
	// Significance is the p-value below which a difference counts as
	// real. Default 0.05; (0, 0.5].
	Significance float64
	// MinSamples is the fewest requests each arm (baseline and canary)
	// must hold for a measurement to be judged; fewer is Inconclusive.
	// Default 100; at least 1.
	MinSamples int64
	// MaxPrefixHitDrop is the drop of the prefix-hit ratio (cached over
	// prompt tokens), as an absolute fraction, tolerated. Default 0.02;
	// [0, 1].
	MaxPrefixHitDrop float64
	// MaxTTFTIncrease is the increase of the TTFT p90, relative to the
	// baseline's, tolerated. Default 0.2 (20%); at least 0.
	MaxTTFTIncrease float64
	// MaxErrorRateIncrease is the increase of the share of failed
	// requests, absolute, tolerated. Default 0.01; [0, 1].
	MaxErrorRateIncrease float64
	// MaxHintRejectedIncrease is the increase of the share of requests
	// whose hint the worker rejected, absolute, tolerated. Default 0.01;
	// [0, 1].
	MaxHintRejectedIncrease float64
}

// DefaultThresholds are the thresholds a RouterRollout gets when it sets
// none.
func DefaultThresholds() Thresholds {
	return Thresholds{
		Significance:            0.05,
		MinSamples:              100,
		MaxPrefixHitDrop:        0.02,
		MaxTTFTIncrease:         0.2,
		MaxErrorRateIncrease:    0.01,
		MaxHintRejectedIncrease: 0.01,
	}
}

// Validate checks every field and names each one out of range.
func (t Thresholds) Validate() error {
	var errs []error
	check := func(name string, v, lo, hi float64, loOpen bool) {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			errs = append(errs, fmt.Errorf("%s %v is not a number", name, v))
		case loOpen && v <= lo, !loOpen && v < lo, v > hi:
			open := "["
			if loOpen {
				open = "("
			}
			errs = append(errs, fmt.Errorf("%s %v is outside %s%v, %v]", name, v, open, lo, hi))
		}
	}
	check("significance", t.Significance, 0, 0.5, true)
	if t.MinSamples < 1 {
		errs = append(errs, fmt.Errorf("minSamples %d is fewer than 1", t.MinSamples))
	}
	check("maxPrefixHitDrop", t.MaxPrefixHitDrop, 0, 1, false)
	check("maxTTFTIncrease", t.MaxTTFTIncrease, 0, math.MaxFloat64, false)
	check("maxErrorRateIncrease", t.MaxErrorRateIncrease, 0, 1, false)
	check("maxHintRejectedIncrease", t.MaxHintRejectedIncrease, 0, 1, false)
	return errors.Join(errs...)
}
