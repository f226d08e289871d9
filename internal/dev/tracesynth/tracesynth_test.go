package tracesynth

import (
	"bytes"
	"os"
	"path/filepath"
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

// The conversation trace chains into sessions one row at a time: a turn
// continues its session's latest row only, so the system prompt that
// every row shares does not merge them.
func TestChainSessionsMooncake(t *testing.T) {
	dir, why := MooncakeDir()
	if dir == "" {
		t.Skip("real traces absent: " + why)
	}
	f, err := os.Open(filepath.Join(dir, "conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	n, err := ChainSessions(f, &out, 512, 2)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Count(out.String(), "\n")
	if rows != 12031 || n < 5000 || n >= rows {
		t.Fatalf("%d rows in %d sessions; want 12,031 rows in fewer sessions than rows", rows, n)
	}
	t.Logf("%d rows, %d sessions", rows, n)
}

func TestChainSessionsRule(t *testing.T) {
	in := `{"timestamp":0,"input_length":1100,"hash_ids":[0,1,2]}
{"timestamp":1,"input_length":1100,"hash_ids":[0,5,6]}
{"timestamp":2,"input_length":2000,"hash_ids":[0,1,7,8]}
{"timestamp":3,"input_length":2000,"hash_ids":[0,1,2,9]}
`
	var out bytes.Buffer
	n, err := ChainSessions(strings.NewReader(in), &out, 512, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`"c0"`, `"c1"`, `"c0"`, `"c2"`}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, l := range lines {
		if !strings.HasSuffix(l, `"session_id":`+want[i]+"}") {
			t.Errorf("line %d = %s; want session %s", i+1, l, want[i])
		}
	}
	if n != 3 {
		t.Errorf("%d sessions, want 3", n)
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
