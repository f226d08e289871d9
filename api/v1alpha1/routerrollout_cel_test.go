package v1alpha1_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestRouterRolloutRejections checks that the API server refuses what a
// RouterRollout may not say, with the CRD's message, and takes the
// sample as it ships.
func TestRouterRolloutRejections(t *testing.T) {
	c := testenv.Get(t).Client
	ns := testenv.NewNamespace(t, c, "kvhint-rollout")
	if _, err := testenv.CreateFile(t, c, ns, filepath.Join("..", "..", "config", "samples", "rollout", "rollout.yaml")); err != nil {
		t.Fatalf("config/samples/rollout/rollout.yaml: %v", err)
	}
	shadow := v1alpha1.RolloutStep{Shadow: &v1alpha1.ShadowStep{}}
	for i, tc := range []struct {
		name string
		spec func(*v1alpha1.RouterRolloutSpec)
		want string
	}{
		{"valid", func(*v1alpha1.RouterRolloutSpec) {}, ""},
		{"no steps", func(s *v1alpha1.RouterRolloutSpec) { s.Steps = nil }, "spec.steps: Required value"},
		{"shadow and canary", func(s *v1alpha1.RouterRolloutSpec) {
			s.Steps = []v1alpha1.RolloutStep{{Shadow: &v1alpha1.ShadowStep{}, Canary: &v1alpha1.CanaryStep{Weight: 10}}}
		}, "spec.steps[0]: Invalid value: set exactly one of shadow: {} or canary: {weight: N}"},
		{"neither", func(s *v1alpha1.RouterRolloutSpec) { s.Steps = []v1alpha1.RolloutStep{{}} }, "set exactly one of shadow: {} or canary: {weight: N}"},
		{"weight 0", func(s *v1alpha1.RouterRolloutSpec) {
			s.Steps = []v1alpha1.RolloutStep{{Canary: &v1alpha1.CanaryStep{Weight: 0}}}
		}, "spec.steps[0].canary.weight: Invalid value: 0: spec.steps[0].canary.weight in body should be greater than or equal to 1"},
		{"11 steps", func(s *v1alpha1.RouterRolloutSpec) {
			for range 10 {
				s.Steps = append(s.Steps, shadow)
			}
		}, "spec.steps: Too many: 11: must have at most 10 items"},
		{"interval under 1s", func(s *v1alpha1.RouterRolloutSpec) {
			s.Analysis.Interval = &metav1.Duration{Duration: 500 * 1e6}
		}, "interval must be between 1s and 24h"},
		{"significance 0.5", func(s *v1alpha1.RouterRolloutSpec) { s.Analysis.Significance = "0.5" }, "significance must be above 0 and below 0.5"},
		{"hit drop over 1", func(s *v1alpha1.RouterRolloutSpec) { s.Analysis.MaxPrefixHitDrop = "1.5" }, "spec.analysis.maxPrefixHitDrop in body should match"},
		{"two providers", func(s *v1alpha1.RouterRolloutSpec) {
			s.Analysis.Provider = &v1alpha1.MetricsProvider{Sidecars: &v1alpha1.SidecarsProvider{}, Prometheus: &v1alpha1.PrometheusProvider{Address: "http://prom:9090"}}
		}, "set exactly one of sidecars: {} or prometheus: {address: ...}"},
		{"prometheus not a URL", func(s *v1alpha1.RouterRolloutSpec) {
			s.Analysis.Provider = &v1alpha1.MetricsProvider{Prometheus: &v1alpha1.PrometheusProvider{Address: "ftp://prom"}}
		}, "address must be an http or https URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := &v1alpha1.RouterRollout{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r" + string(rune('a'+i))},
				Spec:       v1alpha1.RouterRolloutSpec{Router: "r", Steps: []v1alpha1.RolloutStep{shadow}},
			}
			tc.spec(&ro.Spec)
			err := c.Create(context.Background(), ro)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	// spec.router is immutable.
	ro := &v1alpha1.RouterRollout{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "chat"}, ro); err != nil {
		t.Fatal(err)
	}
	ro.Spec.Router = "other"
	if err := c.Update(context.Background(), ro); err == nil || !strings.Contains(err.Error(), "router is immutable") {
		t.Errorf("changing spec.router: %v", err)
	}
}

// TestRouterRolloutMeasurementMetrics: the API server keeps every judged
// metric of a measurement as the manager writes it, and refuses more than
// MaxMeasurementMetrics of them, a metric listed twice, or a verdict it
// does not know.
func TestRouterRolloutMeasurementMetrics(t *testing.T) {
	c := testenv.Get(t).Client
	ns := testenv.NewNamespace(t, c, "kvhint-rollout")
	ctx := context.Background()
	ro := &v1alpha1.RouterRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"},
		Spec:       v1alpha1.RouterRolloutSpec{Router: "r", Steps: []v1alpha1.RolloutStep{{Canary: &v1alpha1.CanaryStep{Weight: 10}}}},
	}
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	samples := &v1alpha1.SampleCounts{Baseline: 936, Canary: 992}
	metric := func(name string) v1alpha1.MetricMeasurement {
		return v1alpha1.MetricMeasurement{Metric: name, Verdict: v1alpha1.MetricSuccessful, Baseline: "0.4442", Canary: "0.4593",
			Change: "0.0151", PValue: "1", Test: "mann-whitney-u", Samples: samples}
	}
	write := func(ms []v1alpha1.MetricMeasurement) error {
		cur := ro.DeepCopy()
		cur.Status.Measurements = []v1alpha1.Measurement{{At: metav1.NowMicro(), Verdict: v1alpha1.VerdictSuccessful, Reason: "WithinThresholds", Metrics: ms}}
		return c.Status().Update(ctx, cur)
	}
	judged := []v1alpha1.MetricMeasurement{metric("prefixHitRatio"), metric("ttftP90"), {Metric: "errorRate", Verdict: v1alpha1.MetricNotMeasured}}
	if err := write(judged); err != nil {
		t.Fatalf("a measurement with three metrics: %v", err)
	}
	got := &v1alpha1.RouterRollout{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ro), got); err != nil {
		t.Fatal(err)
	}
	if ms := got.Status.Measurements; len(ms) != 1 {
		t.Errorf("read back %d measurements, want 1", len(ms))
	} else if diff := cmp.Diff(judged, ms[0].Metrics); diff != "" {
		t.Errorf("metrics read back (-written +read):\n%s", diff)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
		t.Fatal(err)
	}

	var tooMany []v1alpha1.MetricMeasurement
	for i := range v1alpha1.MaxMeasurementMetrics + 1 {
		tooMany = append(tooMany, metric(string(rune('a'+i))))
	}
	bad := metric("ttftP90")
	bad.Verdict = "Great"
	for name, tc := range map[string]struct {
		ms   []v1alpha1.MetricMeasurement
		want string
	}{
		"too many":        {tooMany, "must have at most 8 items"},
		"listed twice":    {[]v1alpha1.MetricMeasurement{metric("ttftP90"), metric("ttftP90")}, "Duplicate value"},
		"unknown verdict": {[]v1alpha1.MetricMeasurement{bad}, `Unsupported value: "Great"`},
	} {
		if err := write(tc.ms); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}
