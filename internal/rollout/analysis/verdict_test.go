package analysis

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// traffic draws request samples: prefix-hit ratios around hit (+-0.3,
// cached tokens rounded down to 16-token blocks, so values tie), TTFTs
// log-normal around ttft seconds, failures and hint rejections at their
// rates.
type traffic struct {
	hit, ttft, errRate, rejectRate float64
	noTTFT                         bool
}

func (tr traffic) draw(rng *rand.Rand, n int, at int64) []rolloutapi.Sample {
	out := make([]rolloutapi.Sample, n)
	for i := range out {
		prompt := int64(128 + rng.IntN(1920))
		f := min(max(tr.hit+(rng.Float64()-0.5)*0.6, 0), 1)
		cached := int64(f*float64(prompt)) / 16 * 16
		s := rolloutapi.Sample{At: at + int64(i), Role: "decode", Prompt: prompt, Cached: cached}
		if !tr.noTTFT {
			s.TTFTMicros = int64(tr.ttft * math.Exp(rng.NormFloat64()*0.4) * 1e6)
		}
		s.Error = rng.Float64() < tr.errRate
		s.HintRejected = rng.Float64() < tr.rejectRate
		out[i] = s
	}
	return out
}

var normalTraffic = traffic{hit: 0.6, ttft: 0.2, errRate: 0.05, rejectRate: 0.05}

func judgeDrawn(th Thresholds, rng *rand.Rand, base, canary traffic, nb, nc int) Verdict {
	return Judge(th, Input{
		Baseline: ArmFromSamples(base.draw(rng, nb, 0)),
		Canary:   ArmFromSamples(canary.draw(rng, nc, 0)),
	})
}

// zeroThresholds judge by significance alone.
func zeroThresholds() Thresholds {
	th := DefaultThresholds()
	th.MaxPrefixHitDrop, th.MaxTTFTIncrease, th.MaxErrorRateIncrease, th.MaxHintRejectedIncrease = 0, 0, 0, 0
	return th
}

// TestIdenticalArmsFailAtTheSignificanceRate: with the same traffic in
// both arms and thresholds of 0 (the tests alone judge), each metric's
// test fails at about its level (significance/4) and the verdict at about
// the significance; with the default thresholds, no more often.
func TestIdenticalArmsFailAtTheSignificanceRate(t *testing.T) {
	const runs = 2000
	rng := rand.New(rand.NewPCG(41, 1))
	failedBy := map[Metric]int{}
	failed, defaultFailed := 0, 0
	for range runs {
		b := ArmFromSamples(normalTraffic.draw(rng, 1000, 0))
		c := ArmFromSamples(normalTraffic.draw(rng, 1000, 0))
		v := Judge(zeroThresholds(), Input{Baseline: b, Canary: c})
		if v.Phase == Failed {
			failed++
		}
		for _, f := range v.Findings {
			if f.Phase == Failed {
				failedBy[f.Metric]++
			}
		}
		if Judge(DefaultThresholds(), Input{Baseline: b, Canary: c}).Phase == Failed {
			defaultFailed++
		}
	}
	// Per metric, Binomial(runs, 0.0125): mean 25, sd 4.96; the
	// verdict, at most Binomial(runs, 0.05): mean 100, sd 9.7. The bounds
	// are about 3 sd either side. Ties and the continuity correction make
	// the rank tests a little conservative, never liberal beyond noise.
	for _, m := range []Metric{MetricPrefixHitRatio, MetricTTFTP90, MetricErrorRate, MetricHintRejectedRate} {
		n := failedBy[m]
		t.Logf("%s: failed %d of %d (%.4f)", m, n, runs, float64(n)/runs)
		if n < 10 || n > 40 {
			t.Errorf("%s: failed %d of %d identical pairs, want about 1.25%% (10..40)", m, n, runs)
		}
	}
	t.Logf("verdict: failed %d of %d (%.4f); with default thresholds %d", failed, runs, float64(failed)/runs, defaultFailed)
	if failed < 70 || failed > 130 {
		t.Errorf("verdict failed %d of %d identical pairs, want about 5%% (70..130)", failed, runs)
	}
	if defaultFailed > failed {
		t.Errorf("default thresholds failed %d identical pairs, more than the tests alone (%d)", defaultFailed, failed)
	}
}

// TestPlantedEffectsFail plants each harm and checks the verdict names
// it, with the figures.
func TestPlantedEffectsFail(t *testing.T) {
	cases := []struct {
		name   string
		canary traffic
		metric Metric
		reason string
	}{
		{"prefix-hit ratio 10 points lower", traffic{hit: 0.5, ttft: 0.2, errRate: 0.05, rejectRate: 0.05}, MetricPrefixHitRatio, ReasonPrefixHitDrop},
		{"TTFT 50% longer", traffic{hit: 0.6, ttft: 0.3, errRate: 0.05, rejectRate: 0.05}, MetricTTFTP90, ReasonTTFTIncrease},
		// 5% -> 15% of 500: z about 5.3 on average, so every seed
		// fails; 5% -> 10% would be z about 3 and pass one seed in five
		// at the level 0.0125 (the test's power, not a fault).
		{"error rate 5% -> 15%", traffic{hit: 0.6, ttft: 0.2, errRate: 0.15, rejectRate: 0.05}, MetricErrorRate, ReasonErrorRateIncrease},
		{"hints rejected 5% -> 15%", traffic{hit: 0.6, ttft: 0.2, errRate: 0.05, rejectRate: 0.15}, MetricHintRejectedRate, ReasonHintRejectedIncrease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// 500 requests per arm, 50 seeds: every one must fail.
			for seed := range uint64(50) {
				v := judgeDrawn(DefaultThresholds(), rand.New(rand.NewPCG(seed, 7)), normalTraffic, c.canary, 500, 500)
				if v.Phase != Failed || v.Failure == nil {
					t.Fatalf("seed %d: %s %s (%s), want Failed by %s", seed, v.Phase, v.Reason, v.Message, c.metric)
				}
				var f *Finding
				for i := range v.Findings {
					if v.Findings[i].Metric == c.metric {
						f = &v.Findings[i]
					}
				}
				if f.Phase != Failed || f.Reason != c.reason || f.P >= f.Level || f.Level != 0.05/4 || f.BaselineSamples == 0 || f.CanarySamples == 0 {
					t.Fatalf("seed %d: finding %+v, want Failed %s with p below 0.05/4 and sample counts", seed, *f, c.reason)
				}
				if v.Metric != c.metric {
					// Another metric failed too, by chance or because the
					// planted effect moves it.
					t.Logf("seed %d: verdict's first failure is %s", seed, v.Metric)
				}
				if seed == 0 {
					t.Logf("%s", v.Message)
				}
			}
		})
	}
}

func TestPlantedDropFigures(t *testing.T) {
	v := judgeDrawn(DefaultThresholds(), rand.New(rand.NewPCG(3, 3)), normalTraffic, traffic{hit: 0.5, ttft: 0.2, errRate: 0.05, rejectRate: 0.05}, 500, 500)
	f := v.Failure
	if f == nil {
		t.Fatalf("want a failure, got %s: %s", v.Phase, v.Message)
	}
	// The planted drop is 10 points; block rounding costs under 16
	// tokens of 128..2047 per request, about half a point.
	if f.Baseline < 0.57 || f.Baseline > 0.61 || f.Canary < 0.47 || f.Canary > 0.51 {
		t.Errorf("figures %.4f -> %.4f, want about 0.59 -> 0.49", f.Baseline, f.Canary)
	}
	if math.Abs(f.Change-(f.Canary-f.Baseline)) > 1e-12 || f.Threshold != 0.02 {
		t.Errorf("change %v threshold %v", f.Change, f.Threshold)
	}
	// Failed requests count for the error rate only.
	if f.BaselineSamples >= 500 || f.BaselineSamples < 400 {
		t.Errorf("baseline observations %d, want the requests that did not fail (about 475)", f.BaselineSamples)
	}
	for _, want := range []string{"prefix-hit ratio fell from 0.5", "(baseline, ", "(canary, ", "mann-whitney-u", "tolerated +0.0200"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
	if v.Baseline.Requests != 500 || v.Canary.Requests != 500 {
		t.Errorf("summaries: %+v %+v", v.Baseline, v.Canary)
	}
}

// TestSignificantButTolerated: with 16k requests per arm a one-point
// drop of the prefix-hit ratio is significant, but within the default
// 2-point threshold: Successful.
func TestSignificantButTolerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	v := judgeDrawn(DefaultThresholds(), rng, normalTraffic, traffic{hit: 0.59, ttft: 0.2, errRate: 0.05, rejectRate: 0.05}, 16384, 16384)
	if v.Phase != Successful {
		t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
	}
	if p := v.Findings[0].P; p >= 0.05 {
		t.Fatalf("prefix-hit p = %v, want a significant drop (< 0.05) the threshold tolerates", p)
	}
}

func TestInconclusive(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	t.Run("no samples", func(t *testing.T) {
		v := Judge(DefaultThresholds(), Input{})
		if v.Phase != Inconclusive || v.Reason != ReasonTooFewSamples || len(v.Findings) != 0 {
			t.Fatalf("%+v", v)
		}
		if want := "too few requests to judge: baseline 0, canary 0, 100 needed in each"; v.Message != want {
			t.Fatalf("message %q, want %q", v.Message, want)
		}
	})
	t.Run("canary below minSamples, even when it looks bad", func(t *testing.T) {
		v := judgeDrawn(DefaultThresholds(), rng, normalTraffic, traffic{hit: 0.1, ttft: 2, errRate: 0.5}, 5000, 99)
		if v.Phase != Inconclusive || v.Reason != ReasonTooFewSamples || !strings.Contains(v.Message, "canary 99") {
			t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
		}
	})
	t.Run("a pod did not answer", func(t *testing.T) {
		in := Input{
			Baseline:   ArmFromSamples(normalTraffic.draw(rng, 500, 0)),
			Canary:     ArmFromSamples(normalTraffic.draw(rng, 500, 0)),
			Unanswered: []string{"router-b", "router-a"},
		}
		v := Judge(DefaultThresholds(), in)
		if v.Phase != Inconclusive || v.Reason != ReasonPodsUnanswered || v.Message != "2 pod(s) did not answer (router-a, router-b)" {
			t.Fatalf("%s %s: %q", v.Phase, v.Reason, v.Message)
		}
		// Harm seen in the pods that answered still fails.
		in.Canary = ArmFromSamples(traffic{hit: 0.4, ttft: 0.2, errRate: 0.05, rejectRate: 0.05}.draw(rng, 500, 0))
		if v := Judge(DefaultThresholds(), in); v.Phase != Failed || v.Metric != MetricPrefixHitRatio {
			t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
		}
	})
	t.Run("TTFT in one arm only", func(t *testing.T) {
		v := judgeDrawn(DefaultThresholds(), rng, normalTraffic, traffic{hit: 0.6, errRate: 0.05, rejectRate: 0.05, noTTFT: true}, 500, 500)
		if v.Phase != Inconclusive || v.Reason != ReasonMetricUnmeasured || !strings.Contains(v.Message, "TTFT p90") {
			t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
		}
	})
}

func TestUnreportedMetricIsNotJudged(t *testing.T) {
	// A router that reports no TTFT: the metric is NotMeasured and the
	// rest decide.
	quiet := traffic{hit: 0.6, errRate: 0.05, rejectRate: 0.05, noTTFT: true}
	v := judgeDrawn(DefaultThresholds(), rand.New(rand.NewPCG(2, 2)), quiet, quiet, 500, 500)
	if v.Phase != Successful || v.Findings[1].Phase != NotMeasured {
		t.Fatalf("%s: %s; TTFT %s", v.Phase, v.Message, v.Findings[1].Phase)
	}
}

func TestArmsFromOutcomes(t *testing.T) {
	const stable, candidate = "00000000000000aa", "00000000000000bb"
	mk := func(at int64, prompt, cached int64, ttft int64, failed bool) rolloutapi.Sample {
		return rolloutapi.Sample{At: at, Prompt: prompt, Cached: cached, TTFTMicros: ttft, Error: failed}
	}
	outcomes := []rolloutapi.Outcomes{
		{Pod: "a", Configs: map[string]*rolloutapi.ConfigOutcomes{
			stable:             {Samples: []rolloutapi.Sample{mk(999, 100, 100, 5, false), mk(1000, 100, 50, 100000, false), mk(1001, 200, 50, 300000, false)}, Dropped: 2},
			candidate:          {Samples: []rolloutapi.Sample{mk(1000, 100, 80, 200000, false), mk(1002, 100, 0, 0, true)}},
			"00000000000000cc": {Samples: []rolloutapi.Sample{mk(1000, 1, 1, 1, false)}},
		}},
		{Pod: "b", Configs: map[string]*rolloutapi.ConfigOutcomes{
			stable: {Samples: []rolloutapi.Sample{mk(2000, 100, 200, 200000, false), mk(2001, -5, 0, 0, false)}},
		}},
	}
	b, c := ArmsFromOutcomes(outcomes, stable, candidate, 1000)
	// Baseline: the sample at 999 is before the window; cached 200 of
	// prompt 100 is capped at 100; the negative prompt counts as a
	// request without tokens.
	if b.Requests != 4 || b.PromptTokens != 400 || b.CachedTokens != 200 || b.Dropped != 2 {
		t.Errorf("baseline %+v", b)
	}
	if want := []float64{0.25, 0.5, 1}; !equalFloats(b.HitRatios, want) {
		t.Errorf("baseline hit ratios %v, want %v", b.HitRatios, want)
	}
	if want := []float64{0.1, 0.2, 0.3}; !equalFloats(b.TTFTs, want) || b.TTFTP50 != 0.2 || b.TTFTP90 != 0.3 {
		t.Errorf("baseline TTFTs %v p50 %v p90 %v", b.TTFTs, b.TTFTP50, b.TTFTP90)
	}
	if c.Requests != 2 || c.Errors != 1 || c.ErrorRate() != 0.5 || c.PrefixHitRatio() != 0.8 || len(c.TTFTs) != 1 {
		t.Errorf("canary %+v", c)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}

func TestThresholdsValidate(t *testing.T) {
	if err := DefaultThresholds().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Thresholds{Significance: 0, MinSamples: 0, MaxPrefixHitDrop: 1.5, MaxTTFTIncrease: -1, MaxErrorRateIncrease: math.NaN(), MaxHintRejectedIncrease: 2}
	err := bad.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		"significance 0 is outside (0, 0.5]",
		"minSamples 0 is fewer than 1",
		"maxPrefixHitDrop 1.5 is outside [0, 1]",
		"maxTTFTIncrease -1 is outside [0,",
		"maxErrorRateIncrease NaN is not a number",
		"maxHintRejectedIncrease 2 is outside [0, 1]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestFewObservationsAreInconclusive(t *testing.T) {
	// Four Prometheus steps per arm: even a clean separation cannot be
	// significant at 0.05/4, so the metric is Inconclusive, not passed.
	arm := func(hits ...float64) Arm {
		ttfts := make([]float64, len(hits))
		for i := range ttfts {
			ttfts[i] = 0.1
		}
		return Arm{Requests: 1000, PromptTokens: 1000, CachedTokens: int64(1000 * hits[0]), HitRatios: hits, TTFTs: ttfts, TTFTP90: 0.1}
	}
	v := Judge(DefaultThresholds(), Input{Baseline: arm(0.6, 0.61, 0.62, 0.63), Canary: arm(0.4, 0.41, 0.42, 0.43)})
	if v.Phase != Inconclusive || v.Reason != ReasonTooFewSamples || !strings.Contains(v.Message, "too few for the test to reach p < 0.0125 (at best 0.0143)") {
		t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
	}
	// Five steps can: the same separation fails.
	v = Judge(DefaultThresholds(), Input{Baseline: arm(0.6, 0.61, 0.62, 0.63, 0.64), Canary: arm(0.4, 0.41, 0.42, 0.43, 0.44)})
	if v.Phase != Failed || v.Metric != MetricPrefixHitRatio || !v.Failure.Exact || math.Abs(v.Failure.P-1.0/252) > 1e-12 {
		t.Fatalf("%s %s: %s", v.Phase, v.Reason, v.Message)
	}
}

// TestArmsBySession: the samples of one session are one observation
// (its cached over prompt tokens, its mean TTFT), across pods; a sample
// without a session is one of its own; the minimum sample size counts
// sessions.
func TestArmsBySession(t *testing.T) {
	const stable, candidate = "00000000000000aa", "00000000000000bb"
	s1, s2 := rolloutapi.SessionKey("s1"), rolloutapi.SessionKey("s2")
	mk := func(session uint64, prompt, cached, ttft int64, failed bool) rolloutapi.Sample {
		return rolloutapi.Sample{At: 1000, Session: session, Prompt: prompt, Cached: cached, TTFTMicros: ttft, Error: failed}
	}
	outcomes := []rolloutapi.Outcomes{
		{Pod: "a", Configs: map[string]*rolloutapi.ConfigOutcomes{
			stable: {Samples: []rolloutapi.Sample{mk(s1, 100, 0, 100000, false), mk(s2, 200, 50, 400000, false), mk(0, 100, 100, 0, false)}},
		}},
		{Pod: "b", Configs: map[string]*rolloutapi.ConfigOutcomes{
			stable:    {Samples: []rolloutapi.Sample{mk(s1, 300, 300, 300000, false), mk(s1, 0, 0, 0, true), mk(0, 100, 0, 0, true)}},
			candidate: {Samples: []rolloutapi.Sample{mk(s1, 100, 100, 100000, false)}},
		}},
	}
	b, c := ArmsFromOutcomes(outcomes, stable, candidate, 0)
	// s1: 300 of 400 tokens, TTFTs 0.1 and 0.3 s, one error in 3; s2:
	// 50 of 200, 0.4 s; the sessionless: 100 of 100, and a failure.
	if b.Requests != 6 || b.Sessions != 4 || b.Errors != 2 {
		t.Errorf("baseline: %d requests, %d sessions, %d errors; want 6, 4, 2", b.Requests, b.Sessions, b.Errors)
	}
	if want := []float64{0.25, 0.75, 1}; !equalFloats(b.HitRatios, want) {
		t.Errorf("baseline hit ratios %v, want %v", b.HitRatios, want)
	}
	if want := []float64{0.2, 0.4}; !equalFloats(b.TTFTs, want) || b.TTFTP90 != 0.4 || b.TTFTP50 != 0.3 {
		t.Errorf("baseline TTFTs %v (p50 %v, p90 %v); want %v, the quantiles over requests 0.3 and 0.4", b.TTFTs, b.TTFTP50, b.TTFTP90, want)
	}
	want := []SessionCounts{{Requests: 3, Errors: 1}, {Requests: 1}, {Requests: 1}, {Requests: 1, Errors: 1}}
	if len(b.SessionCounts) != len(want) {
		t.Fatalf("session counts %+v, want %+v", b.SessionCounts, want)
	}
	for i := range want {
		if b.SessionCounts[i] != want[i] {
			t.Errorf("session counts %+v, want %+v", b.SessionCounts, want)
			break
		}
	}
	if c.Sessions != 1 || c.Requests != 1 {
		t.Errorf("canary: %d sessions of %d requests, want 1 of 1", c.Sessions, c.Requests)
	}
	if n, unit := (&Arm{}).Units(); n != 0 || unit != "requests" {
		t.Errorf("an arm without sessions counts %d %s, want 0 requests", n, unit)
	}
	if empty := ArmFromSamples(nil); empty.SessionCounts == nil {
		t.Errorf("an arm of no samples has no session counts: it would count requests")
	}

	// 300 requests an arm in 30 sessions: too few to judge at 100.
	var bs, cs []rolloutapi.Sample
	for i := range 300 {
		bs = append(bs, mk(uint64(1+i%30), 100, 50, 100000, false))
		cs = append(cs, mk(uint64(1000+i%30), 100, 50, 100000, false))
	}
	v := Judge(DefaultThresholds(), Input{Baseline: ArmFromSamples(bs), Canary: ArmFromSamples(cs)})
	if want := "too few sessions to judge: baseline 30, canary 30, 100 needed in each"; v.Phase != Inconclusive || v.Message != want {
		t.Errorf("300 requests in 30 sessions: %s %q, want Inconclusive %q", v.Phase, v.Message, want)
	}
	th := DefaultThresholds()
	th.MinSamples = 30
	if v := Judge(th, Input{Baseline: ArmFromSamples(bs), Canary: ArmFromSamples(cs)}); v.Phase != Successful ||
		!strings.Contains(v.Message, "baseline 300 requests in 30 sessions, canary 300 requests in 30 sessions") {
		t.Errorf("at minSamples 30: %s %q, want Successful, counting requests and sessions", v.Phase, v.Message)
	}
}
