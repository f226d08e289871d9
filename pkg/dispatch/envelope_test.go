package dispatch

import (
	"encoding/json"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// TestEncodeMessageSize: the buffer is sized before it is written; a size
// too small would cost a second allocation and a copy on every booking.
func TestEncodeMessageSize(t *testing.T) {
	w := hints.NewObjectWriter(nil)
	w.Uint64s("block_hashes", []uint64{1, 18446744073709551615})
	p, err := w.Payload()
	if err != nil {
		t.Fatal(err)
	}
	a := hints.Action{Type: "kv.fetch", Version: "1.0", Payload: p}
	many := make([]*hints.Action, MaxActions)
	for i := range many {
		many[i] = &a
	}
	for _, id := range []string{"r1", `q"uo\te`, "ctl\x01\n", "naïve-日本", "bad\xffutf8", ""} {
		for _, acts := range [][]*hints.Action{many[:1], many[:9], many} {
			msg := encodeMessage(nil, id, acts)
			if !json.Valid(msg) {
				t.Fatalf("id %q, %d actions: invalid JSON %s", id, len(acts), msg)
			}
			var m struct {
				MessageID string            `json:"message_id"`
				Actions   []json.RawMessage `json:"actions"`
			}
			if err := json.Unmarshal(msg, &m); err != nil || len(m.Actions) != len(acts) {
				t.Fatalf("id %q: %v, %d actions", id, err, len(m.Actions))
			}
			ascii := true
			for i := 0; i < len(id); i++ {
				ascii = ascii && id[i] < 0x80
			}
			if ascii && cap(msg) != len(msg) {
				t.Errorf("id %q, %d actions: cap %d, len %d: the size estimate is off", id, len(acts), cap(msg), len(msg))
			}
		}
	}
}
