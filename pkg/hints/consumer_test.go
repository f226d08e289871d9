package hints

import (
	"encoding/binary"
	"testing"
)

// FuzzPayloadFacts holds what ObjectWriter records about a payload to what
// scanning its bytes finds: the dispatcher trusts the first on the booking
// path, and the second is the reference, so they must never disagree.
func FuzzPayloadFacts(f *testing.F) {
	f.Add([]byte{0, 3, 1, 0, 2, 1})
	f.Add([]byte{1, 0, 3, 5})
	f.Add([]byte{2, 2, 4, 1, 0, 0, 5, 0})
	keys := []string{"a", KeyBlockHashes, "execute_at", KeySourceControlEndpoint, "ttl_seconds", "z"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		w := NewObjectWriter(nil)
		// Each op is a key (ascending, as the writer requires) and a kind.
		k := 0
		for i := 0; i+1 < len(ops) && k < len(keys); i += 2 {
			k += int(ops[i] % 3)
			if k >= len(keys) {
				break
			}
			key := keys[k]
			k++
			switch ops[i+1] % 6 {
			case 0:
				w.String(key, "")
			case 1:
				w.String(key, "tcp://10.0.0.7:23280")
			case 2:
				w.Uint64s(key, nil)
			case 3:
				n := int(ops[i+1]/6) % 4
				hs := make([]uint64, n)
				for j := range hs {
					hs[j] = binary.LittleEndian.Uint64(append(ops[i:], make([]byte, 8)...)) >> j
				}
				w.Uint64s(key, hs)
			case 4:
				w.Int(key, -int64(ops[i+1]))
			case 5:
				w.Float(key, float64(ops[i+1])/4)
			}
		}
		p, err := w.Payload()
		if err != nil {
			t.Fatal(err)
		}
		scanned, err := scanPayload(p.Bytes())
		if err != nil {
			t.Fatalf("ObjectWriter wrote %s, which does not scan: %v", p.Bytes(), err)
		}
		if p.facts != scanned {
			t.Fatalf("%s: writer recorded facts %03b, scanning finds %03b", p.Bytes(), p.facts, scanned)
		}
	})
}
