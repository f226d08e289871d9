package analysis

import (
	"math"
	"slices"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Arm is what the requests one config booked measured: the counts the
// rates come from, and the observations the rank tests compare. The
// sidecar provider fills it from request samples (ArmFromSamples), one
// observation per session: a canary books whole sessions, and the turns
// of one session share its cache, so they are not independent
// observations. The Prometheus provider fills it from series, one
// observation per query step.
type Arm struct {
	// Requests counts the requests, failed ones included.
	Requests int64
	// Sessions counts the sessions the requests belong to, a request
	// outside a session counting as one of its own; 0 when the source
	// does not know sessions (Prometheus), and then the minimum sample
	// size counts requests.
	Sessions int64
	// SessionCounts are each session's request, error and hint-rejected
	// counts, for the rates' cluster-robust test; nil when the source
	// does not know sessions, empty (not nil) for samples of none.
	SessionCounts []SessionCounts
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
	// per observation, ascending: from samples, each session's cached
	// over prompt tokens, summed over its requests.
	HitRatios []float64
	// TTFTs are times to the first token in seconds, one per
	// observation, ascending: from samples, each session's mean.
	TTFTs []float64
	// TTFTP50 and TTFTP90 are the TTFT quantiles in seconds, over
	// requests (or as the source gave them); 0 when there are no TTFT
	// observations.
	TTFTP50, TTFTP90 float64
}

// SessionCounts are one session's counts in an arm.
type SessionCounts struct {
	// Requests, Errors and HintsRejected count as Arm's do.
	Requests, Errors, HintsRejected int64
}

// Units is what the minimum sample size counts: sessions when the arm
// was built from samples (SessionCounts set, if empty), else requests.
func (a *Arm) Units() (int64, string) {
	if a.SessionCounts != nil {
		return a.Sessions, "sessions"
	}
	return a.Requests, "requests"
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

// armBuilder gathers one config's samples into an Arm, by session.
type armBuilder struct {
	a Arm
	// bySession indexes sessions by key; a sample without one is a
	// session of its own.
	bySession map[uint64]int
	sessions  []sessionSums
	// ttfts are the requests' TTFTs, for the quantiles.
	ttfts []float64
}

// sessionSums are one session's sums in an arm.
type sessionSums struct {
	counts         SessionCounts
	prompt, cached int64
	ttftSum        float64
	ttftN          int64
}

func newArmBuilder(n int) *armBuilder {
	return &armBuilder{bySession: map[uint64]int{}, sessions: make([]sessionSums, 0, n), ttfts: make([]float64, 0, n)}
}

// add counts one request's sample into the arm and its session. A failed
// request counts for the error rate only: its tokens, TTFT and hint say
// nothing about the cache (the sidecar's kvhint_outcome_requests_total
// counts it as an error only, too). Negative counts are read as 0 and
// cached tokens are capped at the prompt's, so a wrong report cannot
// push a ratio out of [0, 1].
func (b *armBuilder) add(s *rolloutapi.Sample) {
	i, ok := b.bySession[s.Session]
	if s.Session == 0 || !ok {
		i = len(b.sessions)
		b.sessions = append(b.sessions, sessionSums{})
		if s.Session != 0 {
			b.bySession[s.Session] = i
		}
	}
	ss := &b.sessions[i]
	a := &b.a
	a.Requests++
	ss.counts.Requests++
	if s.Error {
		a.Errors++
		ss.counts.Errors++
		return
	}
	if s.HintRejected {
		a.HintsRejected++
		ss.counts.HintsRejected++
	}
	if prompt := max(s.Prompt, 0); prompt > 0 {
		cached := min(max(s.Cached, 0), prompt)
		a.PromptTokens += prompt
		a.CachedTokens += cached
		ss.prompt += prompt
		ss.cached += cached
	}
	if s.TTFTMicros > 0 {
		t := float64(s.TTFTMicros) / 1e6
		b.ttfts = append(b.ttfts, t)
		ss.ttftSum += t
		ss.ttftN++
	}
}

// finish makes each session one observation (its cached over prompt
// tokens, its mean TTFT), sorts the observations and computes the TTFT
// quantiles over requests.
func (b *armBuilder) finish() Arm {
	a := b.a
	a.Sessions = int64(len(b.sessions))
	a.SessionCounts = make([]SessionCounts, len(b.sessions))
	a.HitRatios = make([]float64, 0, len(b.sessions))
	a.TTFTs = make([]float64, 0, len(b.sessions))
	for i := range b.sessions {
		ss := &b.sessions[i]
		a.SessionCounts[i] = ss.counts
		if ss.prompt > 0 {
			a.HitRatios = append(a.HitRatios, float64(ss.cached)/float64(ss.prompt))
		}
		if ss.ttftN > 0 {
			a.TTFTs = append(a.TTFTs, ss.ttftSum/float64(ss.ttftN))
		}
	}
	slices.Sort(a.HitRatios)
	slices.Sort(a.TTFTs)
	slices.Sort(b.ttfts)
	a.TTFTP50 = Quantile(b.ttfts, 0.5)
	a.TTFTP90 = Quantile(b.ttfts, 0.9)
	return a
}

// ArmFromSamples measures one config's request samples.
func ArmFromSamples(samples []rolloutapi.Sample) Arm {
	b := newArmBuilder(len(samples))
	for i := range samples {
		b.add(&samples[i])
	}
	return b.finish()
}

// ArmsFromOutcomes splits the outcomes the router pods served into the
// baseline (requests the stable config booked) and the canary (those the
// candidate booked), keeping samples at or after since (Unix
// milliseconds): the same pods over the same window for both. A session's
// requests in several pods are one session: the key is the same in every
// pod.
func ArmsFromOutcomes(outcomes []rolloutapi.Outcomes, stable, candidate string, since int64) (baseline, canary Arm) {
	fill := func(hash string) Arm {
		n := 0
		for i := range outcomes {
			if c := outcomes[i].Configs[hash]; c != nil {
				n += len(c.Samples)
			}
		}
		b := newArmBuilder(n)
		for i := range outcomes {
			c := outcomes[i].Configs[hash]
			if c == nil {
				continue
			}
			b.a.Dropped += c.Dropped
			for j := range c.Samples {
				if c.Samples[j].At >= since {
					b.add(&c.Samples[j])
				}
			}
		}
		return b.finish()
	}
	return fill(stable), fill(candidate)
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
	// Sessions counts the sessions they belong to (a request outside a
	// session counting as one); 0 when the source does not know them.
	Sessions int64 `json:"sessions,omitempty"`
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
		Sessions:         a.Sessions,
		PrefixHitRatio:   a.PrefixHitRatio(),
		TTFTP50Seconds:   a.TTFTP50,
		TTFTP90Seconds:   a.TTFTP90,
		ErrorRate:        a.ErrorRate(),
		HintRejectedRate: a.HintRejectedRate(),
		Dropped:          a.Dropped,
	}
}
