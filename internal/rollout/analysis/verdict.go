package analysis

import (
	"fmt"
	"slices"
	"strings"
)

// Phase is the outcome of a measurement, in Argo Rollouts' words.
type Phase string

const (
	// Successful: the candidate did no measurable harm.
	Successful Phase = "Successful"
	// Failed: a metric got significantly and materially worse.
	Failed Phase = "Failed"
	// Inconclusive: too little to judge by (too few requests, a pod that
	// did not answer); the rollout pauses, it neither promotes nor rolls
	// back.
	Inconclusive Phase = "Inconclusive"
	// NotMeasured marks a metric neither arm reported (a router that
	// reports no TTFT); it does not count toward the verdict.
	NotMeasured Phase = "NotMeasured"
)

// Metric names a judged metric.
type Metric string

const (
	MetricPrefixHitRatio   Metric = "prefixHitRatio"
	MetricTTFTP90          Metric = "ttftP90"
	MetricErrorRate        Metric = "errorRate"
	MetricHintRejectedRate Metric = "hintRejectedRate"
)

// Reasons of a verdict, in CamelCase for a condition's reason.
const (
	ReasonWithinThresholds     = "WithinThresholds"
	ReasonPrefixHitDrop        = "PrefixHitDrop"
	ReasonTTFTIncrease         = "TTFTIncrease"
	ReasonErrorRateIncrease    = "ErrorRateIncrease"
	ReasonHintRejectedIncrease = "HintRejectedIncrease"
	ReasonTooFewSamples        = "TooFewSamples"
	ReasonPodsUnanswered       = "PodsUnanswered"
	ReasonMetricUnmeasured     = "MetricUnmeasured"
	ReasonCandidateRefused     = "CandidateRefused"
	ReasonCandidatePending     = "CandidatePending"
	ReasonShadowRunning        = "ShadowRunning"
)

// Test names.
const (
	TestMannWhitneyU   = "mann-whitney-u"
	TestTwoProportionZ = "two-proportion-z"
	// TestClusteredProportionZ is the two-proportion z-test with a
	// cluster-robust variance (ClusteredTwoProportionZ), over sessions.
	TestClusteredProportionZ = "two-proportion-z-clustered"
)

// Finding is one metric's judgement.
type Finding struct {
	// Metric is the metric judged.
	Metric Metric `json:"metric"`
	// Phase is this metric's own verdict.
	Phase Phase `json:"phase"`
	// Reason is the verdict's reason when this metric failed or was not
	// judged.
	Reason string `json:"reason,omitempty"`
	// Baseline and Canary are the figures compared: the prefix-hit ratio,
	// the TTFT p90 in seconds, or the rate.
	Baseline float64 `json:"baseline"`
	Canary   float64 `json:"canary"`
	// Change is canary minus baseline; for TTFT, relative to the
	// baseline.
	Change float64 `json:"change"`
	// Threshold is the harmful change tolerated.
	Threshold float64 `json:"threshold"`
	// BaselineSamples and CanarySamples count the observations the test
	// compared (requests for the rates).
	BaselineSamples int64 `json:"baselineSamples"`
	CanarySamples   int64 `json:"canarySamples"`
	// Test names the test; Statistic is its U or z; P its one-sided
	// p-value in the harmful direction; Exact is set for an exact p.
	Test      string  `json:"test,omitempty"`
	Statistic float64 `json:"statistic"`
	P         float64 `json:"p"`
	Exact     bool    `json:"exact,omitempty"`
	// Level is what P was compared with: the significance divided by
	// the number of metrics tested (Bonferroni).
	Level float64 `json:"level,omitempty"`
	// Message says what was seen, for a person.
	Message string `json:"message"`
}

// Input is one measurement to judge.
type Input struct {
	// Baseline and Canary are the arms.
	Baseline, Canary Arm
	// Unanswered names the sources (router pods) that did not answer. A
	// measurement with any is Inconclusive unless the data it has already
	// shows harm: a pod the candidate broke must not drop out of the
	// judgement and let the rest pass it.
	Unanswered []string
}

// Verdict is the judgement of one measurement.
type Verdict struct {
	// Phase is Successful, Failed or Inconclusive.
	Phase Phase `json:"phase"`
	// Reason is the reason in CamelCase: the first failed metric's, or
	// why the measurement is inconclusive, or WithinThresholds.
	Reason string `json:"reason"`
	// Message says why, with the figures, for a condition's message.
	Message string `json:"message"`
	// Metric is the metric that failed the measurement (the first, in
	// the order of Findings); empty unless Failed.
	Metric Metric `json:"metric,omitempty"`
	// Failure is that metric's finding; nil unless Failed.
	Failure *Finding `json:"failure,omitempty"`
	// Findings are the metrics' judgements, in a fixed order: prefix-hit
	// ratio, TTFT p90, error rate, hints-rejected rate. Empty when the
	// arms were too small to judge.
	Findings []Finding `json:"findings,omitempty"`
	// Baseline and Canary summarise the arms.
	Baseline Summary `json:"baseline"`
	Canary   Summary `json:"canary"`
}

// Judge judges one measurement: Inconclusive when either arm holds fewer
// than MinSamples sessions (requests when the arms do not know sessions);
// otherwise each metric is tested one-sided in
// its harmful direction and fails when its p is below Significance/m (m
// the number of metrics tested, a Bonferroni correction: a harmless
// candidate fails a measurement with probability at most Significance)
// and its change is beyond its threshold. Failed when any metric failed (with answering
// pods only, too); Inconclusive when a pod did not answer or a metric one
// arm reported is missing from the other; Successful otherwise.
func Judge(t Thresholds, in Input) Verdict {
	v := Verdict{Baseline: in.Baseline.Summarize(), Canary: in.Canary.Summarize()}
	unanswered := ""
	if len(in.Unanswered) > 0 {
		unanswered = fmt.Sprintf("%d pod(s) did not answer (%s)", len(in.Unanswered), listNames(in.Unanswered))
	}
	// The canary books whole sessions, so sessions are the independent
	// units a sample size counts.
	bn, unit := in.Baseline.Units()
	cn, cunit := in.Canary.Units()
	if unit != cunit {
		bn, cn, unit = in.Baseline.Requests, in.Canary.Requests, "requests"
	}
	if bn < t.MinSamples || cn < t.MinSamples {
		v.Phase, v.Reason = Inconclusive, ReasonTooFewSamples
		v.Message = fmt.Sprintf("too few %s to judge: baseline %d, canary %d, %d needed in each",
			unit, bn, cn, t.MinSamples)
		if unanswered != "" {
			v.Message += "; " + unanswered
		}
		return v
	}
	b, c := &in.Baseline, &in.Canary
	// Several metrics are tested at once; each at Significance/m
	// (Bonferroni) keeps the chance that a harmless candidate fails a
	// measurement at Significance, not m times it.
	tests := 2 // the rates: both arms hold requests
	if len(b.HitRatios) > 0 && len(c.HitRatios) > 0 {
		tests++
	}
	if len(b.TTFTs) > 0 && len(c.TTFTs) > 0 && b.TTFTP90 > 0 {
		tests++
	}
	level := t.Significance / float64(tests)
	v.Findings = []Finding{
		judgeRank(MetricPrefixHitRatio, t, level, b.HitRatios, c.HitRatios, b.PrefixHitRatio(), c.PrefixHitRatio()),
		judgeRank(MetricTTFTP90, t, level, b.TTFTs, c.TTFTs, b.TTFTP90, c.TTFTP90),
		judgeRate(MetricErrorRate, t, level, b, c),
		judgeRate(MetricHintRejectedRate, t, level, b, c),
	}
	var failed, inconclusive []string
	var inconclusiveReason string
	for i := range v.Findings {
		f := &v.Findings[i]
		switch f.Phase {
		case Failed:
			if v.Failure == nil {
				v.Failure, v.Metric, v.Reason = f, f.Metric, f.Reason
			}
			failed = append(failed, f.Message)
		case Inconclusive:
			if inconclusive == nil {
				inconclusiveReason = f.Reason
			}
			inconclusive = append(inconclusive, f.Message)
		}
	}
	switch {
	case len(failed) > 0:
		v.Phase = Failed
		v.Message = strings.Join(failed, "; ")
	case unanswered != "":
		v.Phase, v.Reason = Inconclusive, ReasonPodsUnanswered
		v.Message = unanswered
	case len(inconclusive) > 0:
		v.Phase, v.Reason = Inconclusive, inconclusiveReason
		v.Message = strings.Join(inconclusive, "; ")
	default:
		v.Phase, v.Reason = Successful, ReasonWithinThresholds
		v.Message = fmt.Sprintf("no metric worse beyond its threshold: baseline %s, canary %s; %s",
			describeCount(b), describeCount(c), describeFigures(v.Findings))
	}
	return v
}

// judgeRank judges a metric by the Mann-Whitney U test of its
// observations: lower is harmful for the prefix-hit ratio (absolute
// drop), higher for TTFT (relative increase of the p90).
func judgeRank(m Metric, t Thresholds, level float64, base, canary []float64, bFig, cFig float64) Finding {
	f := Finding{Metric: m, Baseline: bFig, Canary: cFig, Test: TestMannWhitneyU,
		BaselineSamples: int64(len(base)), CanarySamples: int64(len(canary)), P: 1}
	name := metricName(m)
	switch {
	case len(base) == 0 && len(canary) == 0:
		f.Phase, f.Test = NotMeasured, ""
		f.Message = name + ": reported by neither arm"
		return f
	case len(base) == 0 || len(canary) == 0:
		f.Phase, f.Reason = Inconclusive, ReasonMetricUnmeasured
		f.Message = fmt.Sprintf("%s: %d baseline and %d canary observations", name, len(base), len(canary))
		return f
	}
	alt, harm, reason := Less, bFig-cFig, ReasonPrefixHitDrop
	f.Change, f.Threshold = cFig-bFig, t.MaxPrefixHitDrop
	verb := "fell"
	if m == MetricTTFTP90 {
		if bFig <= 0 {
			f.Phase, f.Reason = Inconclusive, ReasonMetricUnmeasured
			f.Message = name + ": baseline p90 is 0, no relative change"
			return f
		}
		alt, harm, reason = Greater, (cFig-bFig)/bFig, ReasonTTFTIncrease
		f.Change, f.Threshold, verb = harm, t.MaxTTFTIncrease, "rose"
	}
	if minP := minRankP(len(base), len(canary), level); minP >= level {
		// Even the most extreme ranking would not be significant: a
		// pass would mean nothing (a few Prometheus steps per arm).
		f.Phase, f.Reason = Inconclusive, ReasonTooFewSamples
		f.Message = fmt.Sprintf("%s: %d baseline and %d canary observations, too few for the test to reach p < %.3g (at best %.3g)",
			name, len(base), len(canary), level, minP)
		return f
	}
	r := MannWhitneyU(canary, base, alt)
	f.Statistic, f.P, f.Exact = r.U, r.P, r.Exact
	f.Phase = Successful
	f.Level = level
	if r.P < level && harm > f.Threshold {
		f.Phase, f.Reason = Failed, reason
	}
	f.Message = fmt.Sprintf("%s %s from %s (baseline, %d) to %s (canary, %d): %s %s, tolerated %s; %s U=%g p=%.3g (level %.3g)",
		name, verbFor(harm, verb), figure(m, bFig), len(base), figure(m, cFig), len(canary),
		harmWord(m), amount(m, harm), amount(m, f.Threshold), f.Test, r.U, r.P, level)
	return f
}

// judgeRate judges a rate by the two-proportion z-test, over sessions
// (cluster-robust) when both arms know them: higher is harmful, by the
// absolute increase.
func judgeRate(m Metric, t Thresholds, level float64, b, c *Arm) Finding {
	events := func(a *Arm) int64 { return a.Errors }
	event := func(s SessionCounts) int64 { return s.Errors }
	if m == MetricHintRejectedRate {
		events = func(a *Arm) int64 { return a.HintsRejected }
		event = func(s SessionCounts) int64 { return s.HintsRejected }
	}
	bx, bn, cx, cn := events(b), b.Requests, events(c), c.Requests
	bRate, cRate := ratio(bx, bn), ratio(cx, cn)
	f := Finding{Metric: m, Baseline: bRate, Canary: cRate, Change: cRate - bRate, Test: TestTwoProportionZ,
		BaselineSamples: bn, CanarySamples: cn, Threshold: t.MaxErrorRateIncrease}
	reason := ReasonErrorRateIncrease
	if m == MetricHintRejectedRate {
		f.Threshold, reason = t.MaxHintRejectedIncrease, ReasonHintRejectedIncrease
	}
	var r ProportionResult
	if b.SessionCounts != nil && c.SessionCounts != nil {
		f.Test = TestClusteredProportionZ
		r = clusteredZ(b.SessionCounts, c.SessionCounts, func(s SessionCounts) Cluster { return Cluster{N: s.Requests, X: event(s)} }, Greater)
	} else {
		r = TwoProportionZ(bx, bn, cx, cn, Greater)
	}
	f.Statistic, f.P = r.Z, r.P
	f.Phase = Successful
	f.Level = level
	if r.P < level && f.Change > f.Threshold {
		f.Phase, f.Reason = Failed, reason
	}
	f.Message = fmt.Sprintf("%s %s from %.4f (baseline, %d of %d) to %.4f (canary, %d of %d): increase %+.4f, tolerated %.4f; %s z=%.3g p=%.3g (level %.3g)",
		metricName(m), verbFor(f.Change, "rose"), bRate, bx, bn, cRate, cx, cn, f.Change, f.Threshold, f.Test, r.Z, r.P, level)
	return f
}

func metricName(m Metric) string {
	switch m {
	case MetricPrefixHitRatio:
		return "prefix-hit ratio"
	case MetricTTFTP90:
		return "TTFT p90"
	case MetricErrorRate:
		return "error rate"
	case MetricHintRejectedRate:
		return "hints-rejected rate"
	}
	return string(m)
}

// verbFor says which way a harmful-direction change went.
func verbFor(harm float64, harmful string) string {
	switch {
	case harm > 0:
		return harmful
	case harm < 0:
		if harmful == "rose" {
			return "fell"
		}
		return "rose"
	}
	return "held"
}

func figure(m Metric, v float64) string {
	if m == MetricTTFTP90 {
		return fmt.Sprintf("%.4gs", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// harmWord names a rank-tested metric's harmful change.
func harmWord(m Metric) string {
	if m == MetricTTFTP90 {
		return "increase"
	}
	return "drop"
}

// amount formats a harmful change: relative for TTFT, absolute else.
func amount(m Metric, v float64) string {
	if m == MetricTTFTP90 {
		return fmt.Sprintf("%+.1f%%", 100*v)
	}
	return fmt.Sprintf("%+.4f", v)
}

// describeCount says how many requests an arm holds, and in how many
// sessions when it knows them.
func describeCount(a *Arm) string {
	if a.SessionCounts == nil {
		return fmt.Sprintf("%d requests", a.Requests)
	}
	return fmt.Sprintf("%d requests in %d sessions", a.Requests, a.Sessions)
}

func describeFigures(fs []Finding) string {
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		if f.Phase == NotMeasured {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s -> %s (p=%.3g)", metricName(f.Metric), figure(f.Metric, f.Baseline), figure(f.Metric, f.Canary), f.P))
	}
	return strings.Join(parts, ", ")
}

// listNames lists up to 5 names, then how many more.
func listNames(names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

// minRankP is the smallest one-sided p-value a rank test of n and m
// observations can give, 1/C(n+m, m), computed until it is below level.
func minRankP(n, m int, level float64) float64 {
	k := min(n, m)
	c := 1.0
	for i := 1; i <= k && 1/c >= level; i++ {
		c = c * float64(n+m-k+i) / float64(i)
	}
	return 1 / c
}
