package preview

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// hostileTraces are small traces that ask preview for more than any
// booking the sidecar takes: billions of blocks from a few bytes, block
// sizes past any int arithmetic.
var hostileTraces = []struct {
	name, trace, want string
	line              int
}{
	{"rows without hash_ids at input_length 2^31-1",
		strings.Repeat(`{"timestamp":0,"input_length":2147483647,"output_length":1}`+"\n", 58), "input_length 2147483647 at block size 512 is 4194304 blocks", 1},
	{"block_size 1", `{"timestamp":0,"input_length":2147483647,"role":"decode","worker":"w","block_size":1}`, "is 2147483647 blocks", 1},
	{"block_size 2^63-1", `{"timestamp":0,"input_length":10}` + "\n" + `{"timestamp":0,"input_length":2147483647,"role":"decode","worker":"w","block_size":9223372036854775807}`, "block_size is 9223372036854775807", 2},
	{"hash_ids against block_size 2^63-1", `{"timestamp":0,"input_length":2147483647,"block_size":9223372036854775807,"role":"decode","worker":"w","hash_ids":[1]}`, "block_size is 9223372036854775807", 1},
}

// A hostile trace is refused at its row, naming the line and the field,
// before the replay allocates for it.
func TestHostileTracesRefused(t *testing.T) {
	for _, tc := range hostileTraces {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(builtin.NewCatalog(), Config{Name: "base", Doc: []byte(benchBase)}, Config{Name: "head", Doc: []byte(benchHead)},
				strings.NewReader(tc.trace), DefaultAssumptions())
			var te *TraceError
			if !errors.As(err, &te) || te.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want trace line %d: ...%s", err, tc.line, tc.want)
			}
		})
	}
}

// The trace reader never panics and never allocates past its bounds,
// whatever a row holds.
func FuzzReadTrace(f *testing.F) {
	for _, tc := range hostileTraces {
		f.Add([]byte(tc.trace), 512)
	}
	for _, s := range []string{
		`{"timestamp":1,"input_length":1024,"output_length":10,"hash_ids":[1,2]}`,
		`{"timestamp":1,"input_length":100,"session_id":"a","turn":1,"role":"decode","worker":"w","block_size":16,"committed_kv_copy":{"block_hashes":[1]},"actions":["kv.fetch"]}`,
		`{"created_time":1,"input_tokens":5,"output_tokens":1,"session_id":3,"delay_ms":4}`,
	} {
		f.Add([]byte(s), 16)
	}
	f.Fuzz(func(t *testing.T, trace []byte, blockSize int) {
		rows, err := ReadTrace(bytes.NewReader(trace), blockSize)
		if err != nil {
			return
		}
		for _, r := range rows {
			bs := blockSize
			if r.BlockSize > 0 {
				bs = r.BlockSize
			}
			if r.InputTokens < 0 || r.InputTokens > MaxInputTokens || bs > MaxBlockSize || blocksOf(r.InputTokens, bs) > MaxBlocksPerRow {
				t.Fatalf("line %d read past the bounds: %+v", r.Line, r)
			}
		}
	})
}
