package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRolloutSteps is the most steps a RouterRollout may list.
const MaxRolloutSteps = 10

// MaxMeasurements is the most measurements a RouterRollout's status keeps
// for its current step.
const MaxMeasurements = 20

// MaxMeasurementMetrics is the most metrics a measurement records the
// figures of. The analysis judges four; the room left is for metrics it
// may judge later without a change of the bound.
const MaxMeasurementMetrics = 8

// RouterRolloutSpec is how a change of one router's compiled config
// reaches its pods: a shadow step, canary steps of growing weight, each
// judged by an analysis of the requests the candidate booked against those
// the stable config booked in the same pods over the same time.
type RouterRolloutSpec struct {
	// router is the name of the router whose config changes this rollout
	// stages: the router of RouterRoles with spec.router=<router> in this
	// namespace, whose compiled ConfigMap is "<router>-hints". One
	// RouterRollout per router: with two, the older one (then the one whose
	// name sorts first) runs and the other reports Ready=False, reason
	// RolloutConflict. A DNS label, at most 63 characters. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="router is immutable: delete the RouterRollout and create one for the other router"
	Router string `json:"router"`

	// steps are the stages a candidate config goes through, in order: each
	// is shadow (every router pod runs the candidate beside the stable
	// config and sends only the stable config's hints) or canary (every
	// router pod books weight percent of sessions with the candidate). A
	// step ends when its pause has passed and its analysis is Successful;
	// after the last step the candidate is promoted to stable. 1 to 10
	// steps.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	Steps []RolloutStep `json:"steps"`

	// analysis is how each step is judged. Leave it out for the defaults.
	// +optional
	Analysis RolloutAnalysis `json:"analysis,omitzero"`

	// paused stops the rollout at its current step while true: the
	// candidate stays staged as it is, no measurement is taken, nothing is
	// promoted or rolled back. Set it back to false (or remove it) to go
	// on. It also resumes a rollout paused because an analysis was
	// Inconclusive, when toggled to true and back. Defaults to false.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// RolloutStep is one stage of a rollout: exactly one of shadow and canary.
//
// +kubebuilder:validation:XValidation:rule="has(self.shadow) != has(self.canary)",message="set exactly one of shadow: {} or canary: {weight: N}"
type RolloutStep struct {
	// shadow runs the candidate beside the stable config on every booking
	// of every router pod: the stable config's hints are sent, the
	// candidate's are only compared with them. The step's analysis fails
	// as soon as a router pod refuses the candidate (reason
	// CandidateRefused).
	// +optional
	Shadow *ShadowStep `json:"shadow,omitempty"`

	// canary books weight percent of sessions (hashed on the session ID,
	// else the request ID) with the candidate, inside every router pod,
	// so that both configs book with the same pods, workers and cache age.
	// +optional
	Canary *CanaryStep `json:"canary,omitempty"`

	// pause is the least time the step lasts, from its start, whatever
	// its analysis says: a Go duration such as 5m. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="pause must be between 0s and 168h"
	Pause *metav1.Duration `json:"pause,omitempty"`
}

// ShadowStep is a step that runs the candidate without sending its hints.
type ShadowStep struct{}

// CanaryStep is a step that books a share of sessions with the candidate.
type CanaryStep struct {
	// weight is the percent of sessions the candidate books, 1 to 100.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`
}

// RolloutAnalysis is how a step is judged. Each measurement compares the
// requests the candidate booked with those the stable config booked since
// the step started, from every router pod: prefix-hit ratio, TTFT and
// error rate, each by a one-sided test at significance, and a metric
// fails only when its difference is both significant and beyond its
// threshold.
type RolloutAnalysis struct {
	// interval is the time between measurements of a step, the first one
	// an interval after the step starts: a Go duration, at least 1s.
	// Defaults to 30s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="interval must be between 1s and 24h"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// count is the number of measurements a step takes; the step's
	// analysis is Successful when count measurements are taken, fewer
	// than failureLimit of them Failed, and the last one Successful.
	// 1 to 20, defaults to 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	Count *int32 `json:"count,omitempty"`

	// failureLimit is the number of Failed measurements of a step that
	// roll the candidate back. 1 to 20, defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	FailureLimit *int32 `json:"failureLimit,omitempty"`

	// minSamples is the least number of sessions each of the two configs
	// must have booked for a measurement to judge (a request reported
	// without a session counts as one; the prometheus provider counts
	// requests); with fewer the measurement is Inconclusive and the
	// rollout pauses. 1 to 1000000, defaults to 100.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MinSamples *int32 `json:"minSamples,omitempty"`

	// significance is the level of each metric's one-sided test: a
	// decimal fraction above 0 and below 0.5, such as "0.05" (the
	// default).
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:Pattern=`^0\.[0-9]{1,6}$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) < 0.5",message="significance must be above 0 and below 0.5"
	Significance string `json:"significance,omitempty"`

	// maxPrefixHitDrop is how far the candidate's prefix-hit ratio
	// (cached prompt tokens over prompt tokens) may fall below the stable
	// config's, as an absolute fraction: "0.02" (the default) is two
	// points. A decimal fraction from 0 to 1.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]{1,6})?|1(\.0{1,6})?)$`
	MaxPrefixHitDrop string `json:"maxPrefixHitDrop,omitempty"`

	// maxTTFTIncrease is how much the candidate's p90 time to first token
	// may exceed the stable config's, relative to it: "0.2" (the default)
	// is 20 percent. A decimal number from 0 to 100.
	// +optional
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:Pattern=`^[0-9]{1,3}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="double(self) <= 100.0",message="maxTTFTIncrease must be at most 100"
	MaxTTFTIncrease string `json:"maxTTFTIncrease,omitempty"`

	// maxErrorRateIncrease is how much the candidate's error rate may
	// exceed the stable config's, as an absolute fraction: "0.01" (the
	// default) is one point. A decimal fraction from 0 to 1.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]{1,6})?|1(\.0{1,6})?)$`
	MaxErrorRateIncrease string `json:"maxErrorRateIncrease,omitempty"`

	// provider is where the outcomes come from. Leave it out for the
	// router sidecars.
	// +optional
	Provider *MetricsProvider `json:"provider,omitempty"`
}

// MetricsProvider is where a rollout's analysis reads request outcomes:
// exactly one of sidecars and prometheus.
//
// +kubebuilder:validation:XValidation:rule="has(self.sidecars) != has(self.prometheus)",message="set exactly one of sidecars: {} or prometheus: {address: ...}"
type MetricsProvider struct {
	// sidecars reads the outcomes each router pod's sidecar holds, from
	// its ops port (the container port named kvhint-ops) on the pod's IP.
	// Nothing to install.
	// +optional
	Sidecars *SidecarsProvider `json:"sidecars,omitempty"`

	// prometheus reads the sidecars' kvhint_outcome_* series from a
	// Prometheus server.
	// +optional
	Prometheus *PrometheusProvider `json:"prometheus,omitempty"`
}

// SidecarsProvider reads outcomes from the router sidecars.
type SidecarsProvider struct{}

// PrometheusProvider reads outcomes from a Prometheus server's HTTP API.
type PrometheusProvider struct {
	// address is the Prometheus server's base URL, http or https, such
	// as http://prometheus.monitoring.svc:9090.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="address must be an http or https URL"
	Address string `json:"address"`
}

// RolloutPhase is where a rollout is.
// +kubebuilder:validation:Enum=Idle;Progressing;Paused;Promoted;RolledBack
type RolloutPhase string

// Rollout phases.
const (
	// RolloutIdle: no candidate has been staged since the rollout was
	// created, or the last one was withdrawn.
	RolloutIdle RolloutPhase = "Idle"
	// RolloutProgressing: a candidate goes through the steps.
	RolloutProgressing RolloutPhase = "Progressing"
	// RolloutPaused: a candidate waits at a step (spec.paused, or an
	// Inconclusive analysis).
	RolloutPaused RolloutPhase = "Paused"
	// RolloutPromoted: the last candidate passed every step and is the
	// stable config.
	RolloutPromoted RolloutPhase = "Promoted"
	// RolloutRolledBack: the last candidate failed, was refused or
	// aborted; the stable config runs.
	RolloutRolledBack RolloutPhase = "RolledBack"
)

// Verdict is the outcome of a measurement.
// +kubebuilder:validation:Enum=Successful;Failed;Inconclusive
type Verdict string

// Verdicts.
const (
	// VerdictSuccessful: no metric is significantly worse beyond its
	// threshold.
	VerdictSuccessful Verdict = "Successful"
	// VerdictFailed: a metric is (or a pod refused the candidate).
	VerdictFailed Verdict = "Failed"
	// VerdictInconclusive: too little to judge (too few samples, pods
	// that did not answer).
	VerdictInconclusive Verdict = "Inconclusive"
)

// Measurement is one judgement of a step.
type Measurement struct {
	// at is when the measurement was taken, to the microsecond (the next
	// one is due an interval after it).
	// +required
	At metav1.MicroTime `json:"at"`

	// verdict is Successful, Failed or Inconclusive.
	// +required
	Verdict Verdict `json:"verdict"`

	// reason is the verdict's reason in CamelCase (PrefixHitDrop,
	// TTFTIncrease, ErrorRateIncrease, CandidateRefused, TooFewSamples,
	// ...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// metric is the metric that decided the verdict, if one did.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Metric string `json:"metric,omitempty"`

	// baseline and canary are that metric's figures for the stable config
	// and the candidate, as text (such as "0.412").
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Baseline string `json:"baseline,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Canary string `json:"canary,omitempty"`

	// pValue is the test's p-value for that metric, as text.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	PValue string `json:"pValue,omitempty"`

	// samples are the requests each config booked in the measurement's
	// window.
	// +optional
	Samples *SampleCounts `json:"samples,omitempty"`

	// metrics are the figures of every metric the measurement judged,
	// whatever its verdict: why a Successful measurement was Successful as
	// much as why a Failed one failed. Empty for a shadow step's
	// measurement and for one with too few samples to judge any metric.
	// metric, baseline, canary and pValue above remain those of the metric
	// that decided a Failed verdict. At most 8.
	// +optional
	// +listType=map
	// +listMapKey=metric
	// +kubebuilder:validation:MaxItems=8
	Metrics []MetricMeasurement `json:"metrics,omitempty"`

	// message says it for a person.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// MetricVerdict is one metric's outcome in a measurement.
// +kubebuilder:validation:Enum=Successful;Failed;Inconclusive;NotMeasured
type MetricVerdict string

// Metric verdicts.
const (
	// MetricSuccessful: the metric is not significantly worse beyond its
	// threshold.
	MetricSuccessful MetricVerdict = "Successful"
	// MetricFailed: the metric is significantly worse beyond its
	// threshold.
	MetricFailed MetricVerdict = "Failed"
	// MetricInconclusive: the metric could not be judged (one config
	// reported it, the other did not).
	MetricInconclusive MetricVerdict = "Inconclusive"
	// MetricNotMeasured: neither config reported the metric (a router
	// that reports no TTFT); it does not count toward the verdict.
	MetricNotMeasured MetricVerdict = "NotMeasured"
)

// MetricMeasurement is one metric's figures in a measurement.
type MetricMeasurement struct {
	// metric names it: prefixHitRatio, ttftP90, errorRate or
	// hintRejectedRate.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Metric string `json:"metric"`

	// verdict is Successful, Failed, Inconclusive or NotMeasured.
	// +required
	Verdict MetricVerdict `json:"verdict"`

	// baseline and canary are the metric's figures for the stable config
	// and the candidate, as text: the prefix-hit ratio, the TTFT p90 in
	// seconds, or the rate.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Baseline string `json:"baseline,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Canary string `json:"canary,omitempty"`

	// change is canary minus baseline, as text; for ttftP90 relative to
	// the baseline (0.1 is 10 percent slower).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Change string `json:"change,omitempty"`

	// pValue is the test's one-sided p-value in the harmful direction, as
	// text.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	PValue string `json:"pValue,omitempty"`

	// test names the test: mann-whitney-u, two-proportion-z or
	// two-proportion-z-clustered (over sessions).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Test string `json:"test,omitempty"`

	// samples are the observations the test compared for each config
	// (sessions, when the outcomes name them; requests for the rates).
	// +optional
	Samples *SampleCounts `json:"samples,omitempty"`
}

// SampleCounts are what each config's arm held: the requests it booked
// or, for one metric (the one a rollback names, each of a measurement's
// metrics), the observations its test compared (sessions, from the
// sidecars; query steps, from Prometheus; requests, for the rates).
type SampleCounts struct {
	// baseline is the stable config's.
	// +required
	// +kubebuilder:validation:Minimum=0
	Baseline int64 `json:"baseline"`
	// canary is the candidate's.
	// +required
	// +kubebuilder:validation:Minimum=0
	Canary int64 `json:"canary"`
}

// Rollback records why a candidate was rolled back.
type Rollback struct {
	// hash is the candidate's content hash.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Hash string `json:"hash"`

	// at is when it was rolled back.
	// +required
	At metav1.MicroTime `json:"at"`

	// step is the index of the step it failed at.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Step int32 `json:"step,omitempty"`

	// reason is why: the Failed measurement's reason (PrefixHitDrop,
	// TTFTIncrease, ErrorRateIncrease, CandidateRefused, ...) or Aborted.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`

	// metric, baseline, canary, pValue and samples are those of the
	// measurement that failed.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Metric string `json:"metric,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Baseline string `json:"baseline,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Canary string `json:"canary,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=32
	PValue string `json:"pValue,omitempty"`
	// +optional
	Samples *SampleCounts `json:"samples,omitempty"`

	// message says it for a person.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// configMap is the immutable ConfigMap that keeps the candidate's
	// compiled config for inspection ("<router>-hints-<hash>").
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConfigMap string `json:"configMap,omitempty"`
}

// RolloutPods counts the router's pods by the config they run.
type RolloutPods struct {
	// total is the number of the router's pods that are not being
	// deleted.
	// +required
	// +kubebuilder:validation:Minimum=0
	Total int32 `json:"total"`
	// onStable is the number whose sidecar runs the stable config.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OnStable int32 `json:"onStable,omitempty"`
	// onCandidate is the number whose sidecar runs the candidate in the
	// current step's stage.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OnCandidate int32 `json:"onCandidate,omitempty"`
	// refused is the number whose sidecar refused the candidate.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Refused int32 `json:"refused,omitempty"`
	// summary is "onCandidate/total" while a candidate is staged, else
	// "onStable/total", for the Pods printer column.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Summary string `json:"summary,omitempty"`
}

// RouterRolloutStatus is the record of a router's rollouts, and all the
// state a rollout needs: a manager that restarts resumes from it.
type RouterRolloutStatus struct {
	// observedGeneration is the metadata.generation the manager last
	// processed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Idle, Progressing, Paused, Promoted or RolledBack.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`

	// stableHash is the content hash of the config every router pod runs
	// by default: the last one promoted.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	StableHash string `json:"stableHash,omitempty"`

	// candidateHash is the content hash of the candidate in flight; empty
	// when none is.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CandidateHash string `json:"candidateHash,omitempty"`

	// currentStep is the index in spec.steps of the step the candidate is
	// at.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CurrentStep int32 `json:"currentStep,omitempty"`

	// stepStartedAt is when the current step started, or last resumed
	// after a pause (spec.paused, or an Inconclusive analysis), to the
	// microsecond: its measurements judge the outcomes since then, the
	// next one is due an interval after it at the earliest, and the step's
	// pause counts from it.
	// +optional
	StepStartedAt *metav1.MicroTime `json:"stepStartedAt,omitempty"`

	// measurements are those taken in the current step, oldest first; at
	// most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Measurements []Measurement `json:"measurements,omitempty"`

	// lastRollback says why the last candidate rolled back was.
	// +optional
	LastRollback *Rollback `json:"lastRollback,omitempty"`

	// pods counts the router's pods by the config they run.
	// +optional
	Pods *RolloutPods `json:"pods,omitempty"`

	// conditions: Progressing (a candidate moves through the steps),
	// Paused, Promoted, RolledBack, Ready (no candidate in flight, and the
	// last one was promoted or none came yet), and for kstatus (Flux,
	// kpt) and Argo CD, present only while True: Reconciling (while
	// Progressing) and Stalled (from a rollback until the next
	// candidate).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RouterRollout stages every change of one router's compiled config: the
// new config (the candidate) runs in shadow on every router pod, then
// books a growing share of sessions beside the stable config, and is
// promoted when each step's analysis is Successful or rolled back when
// one Fails. The platform team owns the strategy; the RouterRoles, which
// app teams own, say what the config is. Its status is the rollout's
// record.
//
// Manual control, by annotations naming the candidate's hash (so that
// they cannot act on another candidate; the manager removes them when
// done): hints.kvrouter.io/promote skips the remaining steps,
// hints.kvrouter.io/abort rolls back now, hints.kvrouter.io/resume goes on
// after an Inconclusive analysis. spec.paused holds the current step.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rro,categories=kvhint
// +kubebuilder:printcolumn:name="Router",type=string,JSONPath=`.spec.router`
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.currentStep`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Stable",type=string,JSONPath=`.status.stableHash`
// +kubebuilder:printcolumn:name="Candidate",type=string,JSONPath=`.status.candidateHash`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.status.pods.summary`,description="router pods on the candidate (while one is staged) or the stable config / all router pods"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.router`
type RouterRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the rollout strategy.
	// +required
	Spec RouterRolloutSpec `json:"spec"`

	// status is the rollout's record. Until the manager first writes it,
	// the API server shows observedGeneration 0.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status RouterRolloutStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// RouterRolloutList is a list of RouterRollouts.
type RouterRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RouterRollout `json:"items"`
}
