package rollout

import (
	"context"
	"strconv"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Judge is the Analysis of the manager: it fetches a measurement from the
// rollout's provider (the router sidecars by default, or a Prometheus
// server) and judges it: a shadow step by the pods' config reports
// (analysis.JudgeShadow), a canary step by the outcomes of both configs
// (analysis.Judge).
type Judge struct {
	sidecars   provider.Provider
	prometheus provider.PrometheusOptions
}

// NewJudge returns a Judge whose sidecar provider has the options so, and
// whose Prometheus providers the options po (their address is each
// rollout's).
func NewJudge(so provider.SidecarOptions, po provider.PrometheusOptions) *Judge {
	return &Judge{sidecars: provider.NewSidecars(so), prometheus: po}
}

// Analyze takes one measurement.
func (j *Judge) Analyze(ctx context.Context, in Input) Result {
	p, err := j.provider(in.Settings.Provider)
	if err != nil {
		return Result{Verdict: v1alpha1.VerdictInconclusive, Reason: "ProviderInvalid", Message: err.Error()}
	}
	m, err := p.Measure(ctx, provider.Query{
		Namespace: in.Namespace, Router: in.Router, Pods: in.Pods,
		Stable: in.Stable, Candidate: in.Stage.Candidate, Since: in.Since,
	})
	if in.Stage.Stage == rolloutapi.StageShadow {
		// The shadow step is judged by what the pods run; the shadow
		// counts, when they came, are reported.
		pods := make([]analysis.PodStatus, 0, len(in.Pods))
		for _, pod := range in.Pods {
			pods = append(pods, analysis.PodStatus{Pod: pod.Name, Status: in.Reports[pod.Name]})
		}
		v := analysis.JudgeShadow(in.Stage.Candidate, pods, m.Shadow)
		return Result{Verdict: verdictOf(v.Phase), Reason: v.Reason, Message: v.Message}
	}
	if err != nil {
		return Result{Verdict: v1alpha1.VerdictInconclusive, Reason: "OutcomesUnavailable", Message: "fetching outcomes: " + err.Error()}
	}
	v := analysis.Judge(thresholds(in.Settings), m.Input)
	r := Result{Verdict: verdictOf(v.Phase), Reason: v.Reason, Message: v.Message, Metric: string(v.Metric),
		Samples: &v1alpha1.SampleCounts{Baseline: v.Baseline.Requests, Canary: v.Canary.Requests},
		Metrics: metricsOf(v.Findings)}
	if f := v.Failure; f != nil {
		r.Baseline, r.Canary = figure(f.Baseline), figure(f.Canary)
		r.PValue = strconv.FormatFloat(f.P, 'g', 3, 64)
		r.Samples = &v1alpha1.SampleCounts{Baseline: f.BaselineSamples, Canary: f.CanarySamples}
	}
	return r
}

// provider returns the provider a rollout's spec names.
func (j *Judge) provider(p *v1alpha1.MetricsProvider) (provider.Provider, error) {
	if p == nil || p.Prometheus == nil {
		return j.sidecars, nil
	}
	o := j.prometheus
	o.Address = p.Prometheus.Address
	return provider.NewPrometheus(o)
}

// thresholds are the analysis thresholds of a rollout's settings.
func thresholds(s Settings) analysis.Thresholds {
	t := analysis.DefaultThresholds()
	t.Significance, t.MinSamples = s.Significance, int64(s.MinSamples)
	t.MaxPrefixHitDrop, t.MaxTTFTIncrease, t.MaxErrorRateIncrease = s.MaxPrefixHitDrop, s.MaxTTFTIncrease, s.MaxErrorRateIncrease
	return t
}

// metricsOf records every finding's figures, so that a Successful
// measurement says what it saw as a Failed one does. Past
// v1alpha1.MaxMeasurementMetrics findings the rest are left out: the
// status stays bounded, and the message still names them.
func metricsOf(fs []analysis.Finding) []v1alpha1.MetricMeasurement {
	if len(fs) == 0 {
		return nil
	}
	fs = fs[:min(len(fs), v1alpha1.MaxMeasurementMetrics)]
	out := make([]v1alpha1.MetricMeasurement, 0, len(fs))
	for _, f := range fs {
		mm := v1alpha1.MetricMeasurement{Metric: string(f.Metric), Verdict: metricVerdictOf(f.Phase)}
		if f.Phase != analysis.NotMeasured {
			mm.Samples = &v1alpha1.SampleCounts{Baseline: f.BaselineSamples, Canary: f.CanarySamples}
		}
		if f.Phase == analysis.Successful || f.Phase == analysis.Failed {
			// Only a metric the test ran on has figures to compare: an
			// Inconclusive one's would be an empty arm's zero and a p of
			// 1 that no test computed.
			mm.Baseline, mm.Canary, mm.Change = figure(f.Baseline), figure(f.Canary), figure(f.Change)
			mm.Test, mm.PValue = f.Test, strconv.FormatFloat(f.P, 'g', 3, 64)
		}
		out = append(out, mm)
	}
	return out
}

// metricVerdictOf is a metric's verdict: a measurement's verdicts, and
// NotMeasured, which only a metric has.
func metricVerdictOf(p analysis.Phase) v1alpha1.MetricVerdict {
	if p == analysis.NotMeasured {
		return v1alpha1.MetricNotMeasured
	}
	return v1alpha1.MetricVerdict(verdictOf(p))
}

func verdictOf(p analysis.Phase) v1alpha1.Verdict {
	switch p {
	case analysis.Successful:
		return v1alpha1.VerdictSuccessful
	case analysis.Failed:
		return v1alpha1.VerdictFailed
	}
	return v1alpha1.VerdictInconclusive
}

// figure writes a metric's figure for a status: four significant digits.
func figure(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
