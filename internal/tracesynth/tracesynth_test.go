package tracesynth

import (
	"bytes"
	"testing"
)

func write(t *testing.T, o Options) []byte {
	t.Helper()
	rows, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != o.Rows {
		t.Fatalf("%d rows, want %d", len(rows), o.Rows)
	}
	var b bytes.Buffer
	if err := Write(&b, rows); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The same options write the same bytes; another seed writes others. Rows
// are in arrival order, and each has one id per block of its prompt.
func TestSeededAndWellFormed(t *testing.T) {
	o := Defaults()
	o.Rows = 2000
	a, b := write(t, o), write(t, o)
	if !bytes.Equal(a, b) {
		t.Error("the same seed wrote different traces")
	}
	o.Seed = 2
	if bytes.Equal(a, write(t, o)) {
		t.Error("another seed wrote the same trace")
	}
	rows, _ := Generate(o)
	sessions, docs := 0, 0
	for i, r := range rows {
		if i > 0 && r.TimestampMS < rows[i-1].TimestampMS {
			t.Fatalf("row %d arrives before row %d", i, i-1)
		}
		if want := (r.InputTokens + o.BlockSize - 1) / o.BlockSize; len(r.Hashes) != want {
			t.Fatalf("row %d: %d ids for %d tokens", i, len(r.Hashes), r.InputTokens)
		}
		if r.Session != "" {
			sessions++
		} else {
			docs++
		}
	}
	if sessions == 0 || docs == 0 {
		t.Errorf("%d chat turns and %d document requests; want both", sessions, docs)
	}
}
