package analysis

import (
	"math"
	"slices"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Arm is what the requests one config booked measured: the counts the
// rates come from, and the observations the rank tests compare. The
// sidecar provider fills it from request samples (ArmFromSamples), one
// observation per request; the Prometheus provider from series, one
// observation per query step.
type Arm struct {
	// Requests counts the requests, failed ones included.
	Requests int64
	// Errors counts the failed requests.
	Errors int64
	// HintsRejected counts the requests, not failed, whose hint the
	// worker rejected.
	HintsRejected int64
	// PromptTokens and CachedTokens sum the prompt tokens of the requests
	// that did not fail and those the engines served from a prefix cache.
	PromptTokens, CachedTokens int64
	// Dropped counts requests the source no longer held (a sidecar's
	// ring wrapped); reported, not judged.
	Dropped int64
	// HitRatio, when set, is the prefix-hit ratio as a source gave it (a
	// Prometheus query override), in place of the token counts'.
	HitRatio *float64
	// HitRatios are prefix-hit ratios (cached over prompt tokens), one
	// per observation, ascending.
	HitRatios []float64
	// TTFTs are times to the first token in seconds, one per
	// observation, ascending.
	TTFTs []float64
	// TTFTP50 and TTFTP90 are the TTFT quantiles in seconds; 0 when
	// there are no TTFT observations.
	TTFTP50, TTFTP90 float64
}

// PrefixHitRatio is the arm's cached over prompt tokens (or HitRatio,
// when set); 0 without prompt tokens.
func (a *Arm) PrefixHitRatio() float64 {
	if a.HitRatio != nil {
		return *a.HitRatio
	}
	return ratio(a.CachedTokens, a.PromptTokens)
}

// ErrorRate is the share of requests that failed; 0 without requests.
func (a *Arm) ErrorRate() float64 { return ratio(a.Errors, a.Requests) }

// HintRejectedRate is the share of requests whose hint the worker
// rejected; 0 without requests.
func (a *Arm) HintRejectedRate() float64 { return ratio(a.HintsRejected, a.Requests) }

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// add counts one request's sample into the arm. A failed request counts
// for the error rate only: its tokens, TTFT and hint say nothing about
// the cache (the sidecar's kvhint_outcome_requests_total counts it as an
// error only, too). Negative counts are read as 0 and cached tokens are
// capped at the prompt's, so a wrong report cannot push a ratio out of
// [0, 1].
func (a *Arm) add(s *rolloutapi.Sample) {
	a.Requests++
	if s.Error {
		a.Errors++
		return
	}
	if s.HintRejected {
		a.HintsRejected++
	}
	if prompt := max(s.Prompt, 0); prompt > 0 {
		cached := min(max(s.Cached, 0), prompt)
		a.PromptTokens += prompt
		a.CachedTokens += cached
		a.HitRatios = append(a.HitRatios, float64(cached)/float64(prompt))
	}
	if s.TTFTMicros > 0 {
		a.TTFTs = append(a.TTFTs, float64(s.TTFTMicros)/1e6)
	}
}

// finish sorts the observations and computes the TTFT quantiles.
func (a *Arm) finish() {
	slices.Sort(a.HitRatios)
	slices.Sort(a.TTFTs)
	a.TTFTP50 = Quantile(a.TTFTs, 0.5)
	a.TTFTP90 = Quantile(a.TTFTs, 0.9)
}

// ArmFromSamples measures one config's request samples.
func ArmFromSamples(samples []rolloutapi.Sample) Arm {
	var a Arm
	a.HitRatios = make([]float64, 0, len(samples))
	a.TTFTs = make([]float64, 0, len(samples))
	for i := range samples {
		a.add(&samples[i])
	}
	a.finish()
	return a
}

// ArmsFromOutcomes splits the outcomes the router pods served into the
// baseline (requests the stable config booked) and the canary (those the
// candidate booked), keeping samples at or after since (Unix
// milliseconds): the same pods over the same window for both.
func ArmsFromOutcomes(outcomes []rolloutapi.Outcomes, stable, candidate string, since int64) (baseline, canary Arm) {
	var nb, nc int
	for i := range outcomes {
		if c := outcomes[i].Configs[stable]; c != nil {
			nb += len(c.Samples)
		}
		if c := outcomes[i].Configs[candidate]; c != nil {
			nc += len(c.Samples)
		}
	}
	fill := func(a *Arm, hash string, n int) {
		a.HitRatios = make([]float64, 0, n)
		a.TTFTs = make([]float64, 0, n)
		for i := range outcomes {
			c := outcomes[i].Configs[hash]
			if c == nil {
				continue
			}
			a.Dropped += c.Dropped
			for j := range c.Samples {
				if c.Samples[j].At >= since {
					a.add(&c.Samples[j])
				}
			}
		}
		a.finish()
	}
	fill(&baseline, stable, nb)
	fill(&canary, candidate, nc)
	return baseline, canary
}

// Quantile is the q-quantile (0 < q <= 1) of ascending values by the
// nearest-rank method: the smallest value with at least q of the values
// at or below it. It is 0 for no values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Summary is an arm's figures as a status shows them.
type Summary struct {
	// Requests counts the requests.
	Requests int64 `json:"requests"`
	// PrefixHitRatio is cached over prompt tokens.
	PrefixHitRatio float64 `json:"prefixHitRatio"`
	// TTFTP50Seconds and TTFTP90Seconds are the TTFT quantiles.
	TTFTP50Seconds float64 `json:"ttftP50Seconds"`
	TTFTP90Seconds float64 `json:"ttftP90Seconds"`
	// ErrorRate is the share of requests that failed.
	ErrorRate float64 `json:"errorRate"`
	// HintRejectedRate is the share of requests whose hint was rejected.
	HintRejectedRate float64 `json:"hintRejectedRate"`
	// Dropped counts requests the source no longer held.
	Dropped int64 `json:"dropped,omitempty"`
}

// Summarize is the arm's summary.
func (a *Arm) Summarize() Summary {
	return Summary{
		Requests:         a.Requests,
		PrefixHitRatio:   a.PrefixHitRatio(),
		TTFTP50Seconds:   a.TTFTP50,
		TTFTP90Seconds:   a.TTFTP90,
		ErrorRate:        a.ErrorRate(),
		HintRejectedRate: a.HintRejectedRate(),
		Dropped:          a.Dropped,
	}
}
