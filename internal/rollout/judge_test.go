package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// sidecarServing runs, on loopback, the ops route of a sidecar that holds
// out, and returns a router pod whose IP and kvhint-ops port lead to it.
func sidecarServing(t *testing.T, name string, out *rolloutapi.Outcomes) corev1.Pod {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != rolloutapi.OutcomesPath {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kvhint-sidecar",
			Ports: []corev1.ContainerPort{{Name: provider.OpsPortName, ContainerPort: int32(port)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

// samples are n requests of 1000 prompt tokens of which cached are served
// from the prefix cache, give or take a spread that differs per request.
func samples(n int, cached int64, at int64) []rolloutapi.Sample {
	out := make([]rolloutapi.Sample, n)
	for i := range out {
		out[i] = rolloutapi.Sample{At: at, Role: "decode", Prompt: 1000, Cached: cached + int64(i%50) - 25, TTFTMicros: 100000 + int64(i%7)*1000}
	}
	return out
}

// TestJudgeOverLoopbackSidecars: the Judge asks a real HTTP sidecar
// route for outcomes and judges them. Planted: the candidate's requests
// hit 400 of 1000 prompt tokens against the stable config's 600 (500
// requests each) -> Failed, PrefixHitDrop, with the figures; the same
// distribution on both arms -> Successful.
func TestJudgeOverLoopbackSidecars(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	at := since.Add(time.Second).UnixMilli()
	set, _ := SettingsOf(v1alpha1.RolloutAnalysis{})
	j := NewJudge(provider.SidecarOptions{AllowLoopback: true, Timeout: 5 * time.Second}, provider.PrometheusOptions{})
	canary := rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageCanary, Weight: 50}

	for _, tc := range []struct {
		name           string
		stable, cand   int64
		verdict        v1alpha1.Verdict
		reason, metric string
	}{
		{"hit ratio falls", 600, 400, v1alpha1.VerdictFailed, "PrefixHitDrop", "prefixHitRatio"},
		{"same", 600, 600, v1alpha1.VerdictSuccessful, "WithinThresholds", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := sidecarServing(t, "r-0", &rolloutapi.Outcomes{Pod: "r-0", Configs: map[string]*rolloutapi.ConfigOutcomes{
				stableH: {Samples: samples(500, tc.stable, at)},
				candH:   {Samples: samples(500, tc.cand, at)},
			}})
			r := j.Analyze(context.Background(), Input{Namespace: "ns", Router: "r", Stage: canary, Stable: stableH, Since: since, Settings: set, Pods: []corev1.Pod{pod}})
			if r.Verdict != tc.verdict || r.Reason != tc.reason || r.Metric != tc.metric {
				t.Fatalf("got %+v", r)
			}
			if tc.verdict == v1alpha1.VerdictFailed {
				if r.Baseline != "0.5995" || r.Canary != "0.3995" || r.Samples == nil || r.Samples.Canary != 500 || r.PValue == "" {
					t.Errorf("figures: baseline %s canary %s p %s samples %+v", r.Baseline, r.Canary, r.PValue, r.Samples)
				}
				if p, err := strconv.ParseFloat(r.PValue, 64); err != nil || p >= 0.05 {
					t.Errorf("p %q", r.PValue)
				}
			}
			// Every metric judged has its figures, whatever the verdict:
			// a Successful measurement says what it compared. The
			// samples name no session, so each request is one: the
			// rates' test is the clustered one over clusters of one.
			// samples spreads the cached tokens by -25 to +24: a mean of
			// cached-0.5 per 1000 prompt tokens.
			ratio := func(cached int64) string { return figure((float64(cached) - 0.5) / 1000) }
			want := []v1alpha1.MetricMeasurement{
				{Metric: "prefixHitRatio", Verdict: v1alpha1.MetricVerdict(tc.verdict), Baseline: ratio(tc.stable),
					Canary: ratio(tc.cand), Change: figure(float64(tc.cand-tc.stable) / 1000), Test: "mann-whitney-u",
					Samples: &v1alpha1.SampleCounts{Baseline: 500, Canary: 500}},
				{Metric: "ttftP90", Verdict: v1alpha1.MetricSuccessful, Baseline: "0.106", Canary: "0.106", Change: "0", Test: "mann-whitney-u",
					Samples: &v1alpha1.SampleCounts{Baseline: 500, Canary: 500}},
				{Metric: "errorRate", Verdict: v1alpha1.MetricSuccessful, Baseline: "0", Canary: "0", Change: "0", Test: "two-proportion-z-clustered",
					Samples: &v1alpha1.SampleCounts{Baseline: 500, Canary: 500}},
				{Metric: "hintRejectedRate", Verdict: v1alpha1.MetricSuccessful, Baseline: "0", Canary: "0", Change: "0", Test: "two-proportion-z-clustered",
					Samples: &v1alpha1.SampleCounts{Baseline: 500, Canary: 500}},
			}
			got := make([]v1alpha1.MetricMeasurement, len(r.Metrics))
			for i, m := range r.Metrics {
				if _, err := strconv.ParseFloat(m.PValue, 64); err != nil {
					t.Errorf("%s: p %q", m.Metric, m.PValue)
				}
				m.PValue = ""
				got[i] = m
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if m := r.measurement(metav1.NewMicroTime(since)); len(m.Metrics) != len(r.Metrics) {
				t.Errorf("the status's measurement records %d metrics of %d", len(m.Metrics), len(r.Metrics))
			}
		})
	}

	// No traffic: Inconclusive.
	pod := sidecarServing(t, "r-0", &rolloutapi.Outcomes{Pod: "r-0", Configs: map[string]*rolloutapi.ConfigOutcomes{}})
	r := j.Analyze(context.Background(), Input{Stage: canary, Stable: stableH, Since: since, Settings: set, Pods: []corev1.Pod{pod}})
	if r.Verdict != v1alpha1.VerdictInconclusive || r.Reason != "TooFewSamples" {
		t.Errorf("no traffic: %+v", r)
	}

	// Shadow: judged by what the pods run.
	shadow := rolloutapi.Stage{Candidate: candH, Stage: rolloutapi.StageShadow}
	reports := map[string]*rolloutapi.ConfigStatus{"r-0": {Active: stableH, Candidate: &rolloutapi.CandidateStatus{Assigned: candH, Active: candH, Stage: rolloutapi.StageShadow}}}
	r = j.Analyze(context.Background(), Input{Stage: shadow, Stable: stableH, Since: since, Settings: set, Pods: []corev1.Pod{pod}, Reports: reports})
	if r.Verdict != v1alpha1.VerdictSuccessful || !strings.Contains(r.Message, "1 of 1 pods run candidate "+candH+" in shadow") {
		t.Errorf("shadow: %+v", r)
	}

	// A pod IP the manager must not reach is not asked: Inconclusive.
	bad := pod.DeepCopy()
	bad.Status.PodIP = "169.254.169.254"
	r = j.Analyze(context.Background(), Input{Stage: canary, Stable: stableH, Since: since, Settings: set, Pods: []corev1.Pod{*bad}})
	if r.Verdict != v1alpha1.VerdictInconclusive {
		t.Errorf("link-local pod IP: %+v", r)
	}
}

// TestMetricsOfBounded: the status keeps at most MaxMeasurementMetrics
// metrics of a measurement, and gives figures only to a metric a test ran
// on.
func TestMetricsOfBounded(t *testing.T) {
	var fs []analysis.Finding
	for i := range v1alpha1.MaxMeasurementMetrics + 3 {
		fs = append(fs, analysis.Finding{Metric: analysis.Metric(fmt.Sprintf("m%d", i)), Phase: analysis.Successful,
			Baseline: 0.5, Canary: 0.25, Change: -0.25, Test: analysis.TestTwoProportionZ, P: 0.5, BaselineSamples: 10, CanarySamples: 20})
	}
	fs[1].Phase, fs[1].Test = analysis.NotMeasured, ""
	fs[2].Phase = analysis.Inconclusive
	fs[3].Phase = analysis.Failed
	got := metricsOf(fs)
	if len(got) != v1alpha1.MaxMeasurementMetrics {
		t.Fatalf("%d metrics recorded, at most %d wanted", len(got), v1alpha1.MaxMeasurementMetrics)
	}
	samples := &v1alpha1.SampleCounts{Baseline: 10, Canary: 20}
	want := []v1alpha1.MetricMeasurement{
		{Metric: "m0", Verdict: v1alpha1.MetricSuccessful, Baseline: "0.5", Canary: "0.25", Change: "-0.25", PValue: "0.5", Test: analysis.TestTwoProportionZ, Samples: samples},
		{Metric: "m1", Verdict: v1alpha1.MetricNotMeasured},
		{Metric: "m2", Verdict: v1alpha1.MetricInconclusive, Samples: samples},
		{Metric: "m3", Verdict: v1alpha1.MetricFailed, Baseline: "0.5", Canary: "0.25", Change: "-0.25", PValue: "0.5", Test: analysis.TestTwoProportionZ, Samples: samples},
	}
	if diff := cmp.Diff(want, got[:4]); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if metricsOf(nil) != nil {
		t.Error("no findings (a shadow step, too few samples) record no metrics")
	}
}
