package preview

import (
	"bytes"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/tracesynth"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

const benchBase = `worker_selection:
  prefill:
    type: kvcr
    hints:
      - type: kv-fetch
        parameters: {min_blocks: 4}
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-evict
`

const benchHead = `worker_selection:
  prefill:
    type: kvcr
    hints:
      - type: kv-fetch
        parameters: {min_blocks: 1}
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-retain
        parameters: {ttl_seconds: 120}
      - type: kv-evict
`

// BenchmarkPreview is a whole preview: a synthesized trace of 10,000 rows
// (tracesynth defaults, seed 1), read and replayed under two disaggregated
// configs with 8 workers per role.
func BenchmarkPreview(b *testing.B) {
	o := tracesynth.Defaults()
	o.Rows = 10000
	rows, err := tracesynth.Generate(o)
	if err != nil {
		b.Fatal(err)
	}
	var tr bytes.Buffer
	if err := tracesynth.Write(&tr, rows); err != nil {
		b.Fatal(err)
	}
	cat := builtin.NewCatalog()
	a := DefaultAssumptions()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Run(cat, Config{Name: "base", Doc: []byte(benchBase)}, Config{Name: "head", Doc: []byte(benchHead)}, bytes.NewReader(tr.Bytes()), a); err != nil {
			b.Fatal(err)
		}
	}
}
