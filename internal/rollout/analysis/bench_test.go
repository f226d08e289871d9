package analysis

import (
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// benchOutcomes are 4 pods' outcomes holding 16384 samples per arm in
// all, as a sidecar provider hands them over.
func benchOutcomes(stable, candidate string) []rolloutapi.Outcomes {
	rng := rand.New(rand.NewPCG(1, 1))
	out := make([]rolloutapi.Outcomes, 4)
	for i := range out {
		out[i] = rolloutapi.Outcomes{Configs: map[string]*rolloutapi.ConfigOutcomes{
			stable:    {Samples: normalTraffic.draw(rng, 4096, 0)},
			candidate: {Samples: traffic{hit: 0.58, ttft: 0.21, errRate: 0.05, rejectRate: 0.05}.draw(rng, 4096, 0)},
		}}
	}
	return out
}

// BenchmarkMeasurement16k is one measurement of 16384 requests per arm:
// splitting the pods' outcomes into arms (sorting the observations) and
// judging them.
func BenchmarkMeasurement16k(b *testing.B) {
	const stable, candidate = "000000000000000a", "000000000000000b"
	outcomes := benchOutcomes(stable, candidate)
	th := DefaultThresholds()
	b.ReportAllocs()
	for b.Loop() {
		base, canary := ArmsFromOutcomes(outcomes, stable, candidate, 0)
		if v := Judge(th, Input{Baseline: base, Canary: canary}); v.Phase == "" {
			b.Fatal("no verdict")
		}
	}
}

// BenchmarkJudge16k is Judge alone on arms of 16384 requests each.
func BenchmarkJudge16k(b *testing.B) {
	const stable, candidate = "000000000000000a", "000000000000000b"
	base, canary := ArmsFromOutcomes(benchOutcomes(stable, candidate), stable, candidate, 0)
	th := DefaultThresholds()
	b.ReportAllocs()
	for b.Loop() {
		if v := Judge(th, Input{Baseline: base, Canary: canary}); v.Phase == "" {
			b.Fatal("no verdict")
		}
	}
}
