// Package rollout holds the manager's staged rollout of a router's
// compiled config, apart from the reconcilers that run it: what a
// RouterRollout's spec means once defaults are applied (Settings), how
// the router pods' config reports count (CountPods), how the rollout moves
// from one observation to the next (Advance), the conditions its status
// shows, and what the router's ConfigMap holds while a candidate is staged
// (Render).
//
// It reads no API and writes nothing: the reconcilers in package
// controllers observe, call it and write. Judging a step is behind two
// interface, Analysis; Judge implements it with the metric providers of
// internal/rollout/provider and the statistics of
// internal/rollout/analysis.
package rollout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// Defaults of a RouterRollout's analysis (spec.analysis).
const (
	DefaultInterval             = 30 * time.Second
	DefaultCount                = 3
	DefaultFailureLimit         = 1
	DefaultMinSamples           = 100
	DefaultSignificance         = 0.05
	DefaultMaxPrefixHitDrop     = 0.02
	DefaultMaxTTFTIncrease      = 0.2
	DefaultMaxErrorRateIncrease = 0.01
)

// Settings are a RouterRollout's analysis settings with the defaults
// applied.
type Settings struct {
	Interval             time.Duration
	Count                int
	FailureLimit         int
	MinSamples           int
	Significance         float64
	MaxPrefixHitDrop     float64
	MaxTTFTIncrease      float64
	MaxErrorRateIncrease float64
	// Provider is where outcomes come from; nil is the sidecars.
	Provider *v1alpha1.MetricsProvider
}

// SettingsOf returns the settings of a spec. The API server checks the
// fields' forms, so an error means its validation was bypassed; it names
// the field.
func SettingsOf(a v1alpha1.RolloutAnalysis) (Settings, error) {
	s := Settings{
		Interval: DefaultInterval, Count: DefaultCount, FailureLimit: DefaultFailureLimit,
		MinSamples: DefaultMinSamples, Significance: DefaultSignificance,
		MaxPrefixHitDrop: DefaultMaxPrefixHitDrop, MaxTTFTIncrease: DefaultMaxTTFTIncrease,
		MaxErrorRateIncrease: DefaultMaxErrorRateIncrease, Provider: a.Provider,
	}
	if a.Interval != nil {
		if a.Interval.Duration < time.Second {
			return s, fmt.Errorf("spec.analysis.interval %s: at least 1s", a.Interval.Duration)
		}
		s.Interval = a.Interval.Duration
	}
	if a.Count != nil {
		s.Count = int(*a.Count)
	}
	if a.FailureLimit != nil {
		s.FailureLimit = int(*a.FailureLimit)
	}
	if a.MinSamples != nil {
		s.MinSamples = int(*a.MinSamples)
	}
	for _, f := range []struct {
		name, val string
		into      *float64
	}{
		{"significance", a.Significance, &s.Significance},
		{"maxPrefixHitDrop", a.MaxPrefixHitDrop, &s.MaxPrefixHitDrop},
		{"maxTTFTIncrease", a.MaxTTFTIncrease, &s.MaxTTFTIncrease},
		{"maxErrorRateIncrease", a.MaxErrorRateIncrease, &s.MaxErrorRateIncrease},
	} {
		if f.val == "" {
			continue
		}
		v, err := strconv.ParseFloat(f.val, 64)
		if err != nil || v < 0 {
			return s, fmt.Errorf("spec.analysis.%s %q: not a non-negative decimal number", f.name, f.val)
		}
		*f.into = v
	}
	if s.Count < 1 || s.FailureLimit < 1 || s.MinSamples < 1 {
		return s, fmt.Errorf("spec.analysis: count, failureLimit and minSamples must be at least 1")
	}
	return s, nil
}

// StageOf returns the stage a step stages candidate in.
func StageOf(step v1alpha1.RolloutStep, candidate string) rolloutapi.Stage {
	if step.Canary != nil {
		return rolloutapi.Stage{Candidate: candidate, Stage: rolloutapi.StageCanary, Weight: int(step.Canary.Weight)}
	}
	return rolloutapi.Stage{Candidate: candidate, Stage: rolloutapi.StageShadow}
}

// StepName says a step for a person: "shadow" or "canary 10%".
func StepName(step v1alpha1.RolloutStep) string {
	if step.Canary != nil {
		return fmt.Sprintf("canary %d%%", step.Canary.Weight)
	}
	return "shadow"
}

// Input is what Analysis judges: one measurement of a step.
type Input struct {
	// Namespace and Router name the router.
	Namespace, Router string
	// Stage is the step's stage; Stage.Candidate the candidate's hash.
	Stage rolloutapi.Stage
	// Stable is the stable config's hash.
	Stable string
	// Since is when the step started: outcomes before it are not the
	// step's.
	Since time.Time
	// Settings are the rollout's analysis settings.
	Settings Settings
	// Pods are the router's pods that run a config (not being deleted,
	// not terminated), with their IP and ops port.
	Pods []corev1.Pod
	// Reports are the pods' config reports, by pod name; a pod whose
	// sidecar reported nothing readable has none.
	Reports map[string]*rolloutapi.ConfigStatus
}

// Result is a measurement's judgement. Its fields are those of a
// v1alpha1.Measurement, At aside.
type Result struct {
	Verdict  v1alpha1.Verdict
	Reason   string
	Metric   string
	Baseline string
	Canary   string
	PValue   string
	Samples  *v1alpha1.SampleCounts
	// Metrics are the figures of every metric judged, at most
	// v1alpha1.MaxMeasurementMetrics.
	Metrics []v1alpha1.MetricMeasurement
	Message string
}

// measurement is r as the status records it, taken at at.
func (r Result) measurement(at metav1.MicroTime) v1alpha1.Measurement {
	return v1alpha1.Measurement{
		At: at, Verdict: r.Verdict, Reason: r.Reason, Metric: r.Metric,
		Baseline: r.Baseline, Canary: r.Canary, PValue: r.PValue, Samples: r.Samples,
		Metrics: r.Metrics, Message: clip(r.Message, 1024),
	}
}

// Analysis takes one measurement of a step: it fetches what the router
// pods' configs did since the step started and judges it (Judge).
type Analysis interface {
	Analyze(ctx context.Context, in Input) Result
}

// NoAnalysis is the Analysis of a manager built without one: every
// measurement is Inconclusive, so a rollout holds its candidate at the
// first step until promoted or aborted by hand.
type NoAnalysis struct{}

// Analyze returns Inconclusive.
func (NoAnalysis) Analyze(context.Context, Input) Result {
	return Result{Verdict: v1alpha1.VerdictInconclusive, Reason: "NoAnalysis",
		Message: "this manager has no analysis linked: promote or abort by hand (hints.kvrouter.io/promote, hints.kvrouter.io/abort)"}
}
