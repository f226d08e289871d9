package tracesynth

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/preview"
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

// The two formats are the same requests: kvhint preview reads both to the
// same rows (arrival, lengths, ids, sessions).
func TestWriteFormatsReadAlike(t *testing.T) {
	o := Defaults()
	o.Rows = 500
	rows, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	var got [2][]preview.Row
	for i, f := range []string{FormatMooncake, FormatDynamo} {
		var b bytes.Buffer
		if err := WriteFormat(&b, rows, f); err != nil {
			t.Fatal(err)
		}
		if f == FormatDynamo && !strings.Contains(b.String(), `{"delay":`) {
			t.Fatal("the dynamo format has no delay")
		}
		if got[i], err = preview.ReadTrace(&b, o.BlockSize); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if len(got[0]) != len(rows) || len(got[1]) != len(rows) {
		t.Fatalf("%d and %d rows, want %d", len(got[0]), len(got[1]), len(rows))
	}
	for i := range got[0] {
		a, b := got[0][i], got[1][i]
		if a.At != b.At || a.InputTokens != b.InputTokens || a.Session != b.Session || !slices.Equal(a.Hashes, b.Hashes) || a.Final != b.Final {
			t.Fatalf("row %d: mooncake %+v, dynamo %+v", i, a, b)
		}
	}
	if err := WriteFormat(&bytes.Buffer{}, rows, "csv"); err == nil {
		t.Error("format csv accepted")
	}
}
