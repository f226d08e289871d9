package preview

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/tracesynth"
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
	tr := []byte(synthTrace(b, 10000, tracesynth.Defaults().BlockSize))
	cat := builtin.NewCatalog()
	a := DefaultAssumptions()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Run(cat, Config{Name: "base", Doc: []byte(benchBase)}, Config{Name: "head", Doc: []byte(benchHead)}, bytes.NewReader(tr), a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordedChoicesManyWorkers replays a recorded trace under
// --choices recorded whose 10,000 rows each name their own decode worker:
// the replay's work must grow with the rows, not with rows times workers.
func BenchmarkRecordedChoicesManyWorkers(b *testing.B) {
	var tr bytes.Buffer
	for i := range 10000 {
		fmt.Fprintf(&tr, `{"timestamp":%d,"request_id":"r%d","role":"decode","worker":"w%d","input_length":1024,"block_size":512,"actions":[]}`+"\n", i, i, i)
	}
	cat := builtin.NewCatalog()
	a := DefaultAssumptions()
	a.RecordedChoices = true
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Run(cat, Config{Name: "base", Doc: []byte(benchBase)}, Config{Name: "head", Doc: []byte(benchHead)}, bytes.NewReader(tr.Bytes()), a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPreview100k is the speed goal: 100,000 synthesized rows
// (tracesynth defaults, seed 1), two disaggregated configs, 8 workers per
// role, without the sensitivity strip (which replays four more pairs);
// hash ids of 512 tokens, and engine blocks of 512 or of 16 tokens with the
// same cache in tokens.
func BenchmarkPreview100k(b *testing.B) {
	tr := []byte(synthTrace(b, 100000, tracesynth.Defaults().BlockSize))
	cat := builtin.NewCatalog()
	for _, engine := range []int{512, 16} {
		b.Run(fmt.Sprintf("engine-block-%d", engine), func(b *testing.B) {
			a := DefaultAssumptions()
			a.Sensitivity = false
			a.EngineBlockSize = engine
			a.Topology.Default.CacheBlocks = DefaultCacheBlocks * DefaultBlockSize / engine
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(cat, Config{Name: "base", Doc: []byte(benchBase)}, Config{Name: "head", Doc: []byte(benchHead)}, bytes.NewReader(tr), a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
