package outcomes

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

// BenchmarkStoreAdd is the cost of keeping one outcome, its series
// counted, in a full ring.
func BenchmarkStoreAdd(b *testing.B) {
	s := NewStore(Options{Metrics: NewMetrics(prometheus.NewRegistry())})
	o := &bookingapi.Outcome{RequestID: "r", Role: "decode", Worker: "w", ConfigHash: hashA, PromptTokens: 4096, CachedTokens: 3072, TTFTSeconds: 0.08}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Add(o); err != nil {
			b.Fatal(err)
		}
	}
}
