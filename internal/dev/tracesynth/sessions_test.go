package tracesynth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

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

// chainByStrings is ChainSessions as first written, apart from it: each
// prefix keyed by the text of its ids, every prefix of every row built
// anew. The hashed keys must chain exactly as it does.
func chainByStrings(t *testing.T, data []byte, blockSize, minBlocks int) []string {
	t.Helper()
	tails := map[string]int{}
	sessions := 0
	var ids []string
	key := func(hs []uint64) string {
		var b strings.Builder
		for _, h := range hs {
			b.WriteString(strconv.FormatUint(h, 10) + ",")
		}
		return b.String()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var row struct {
			InputLength int      `json:"input_length"`
			HashIDs     []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		s := -1
		for k := len(row.HashIDs); k >= minBlocks; k-- {
			if id, ok := tails[key(row.HashIDs[:k])]; ok {
				s = id
				delete(tails, key(row.HashIDs[:k]))
				break
			}
		}
		if s < 0 {
			s = sessions
			sessions++
		}
		if whole := min(row.InputLength/blockSize, len(row.HashIDs)); whole >= minBlocks {
			tails[key(row.HashIDs[:whole])] = s
		}
		ids = append(ids, "c"+strconv.Itoa(s))
	}
	return ids
}

// TestChainSessionsAsByStrings: on the real conversation trace (or, where
// it is absent, a synthetic one with its session ids dropped), the hashed
// prefix keys chain every row into the session the plain string keys do.
func TestChainSessionsAsByStrings(t *testing.T) {
	var data []byte
	if dir, _ := MooncakeDir(); dir != "" {
		var err error
		if data, err = os.ReadFile(filepath.Join(dir, "conversation_trace.jsonl")); err != nil {
			t.Fatal(err)
		}
	} else {
		o := Defaults()
		o.Rows = 3000
		rows, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, r := range rows {
			fmt.Fprintf(&b, `{"timestamp":%d,"input_length":%d,"output_length":%d,"hash_ids":%s}`+"\n", r.TimestampMS, r.InputTokens, r.OutputTokens, mustJSON(t, r.Hashes))
		}
		data = b.Bytes()
	}
	want := chainByStrings(t, data, 512, 2)
	var out bytes.Buffer
	if _, err := ChainSessions(bytes.NewReader(data), &out, 512, 2); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d rows out, want %d", len(lines), len(want))
	}
	for i, l := range lines {
		if !strings.HasSuffix(l, `"session_id":"`+want[i]+`"}`) {
			t.Fatalf("row %d: %s; want session %s", i+1, l, want[i])
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChainSessionsInput: a null session_id is no session (the row gets
// one, once); a row that has one, a bad row and a line past the scanner's
// limit are errors that name their line.
func TestChainSessionsInput(t *testing.T) {
	var out bytes.Buffer
	if _, err := ChainSessions(strings.NewReader(`{"timestamp":0,"input_length":1100,"hash_ids":[0,1,2],"session_id":null}`+"\n"), &out, 512, 2); err != nil {
		t.Fatalf("a null session_id: %v", err)
	}
	var row map[string]any
	if err := json.Unmarshal(out.Bytes(), &row); err != nil || row["session_id"] != "c0" || strings.Count(out.String(), "session_id") != 1 {
		t.Errorf("a null session_id became %s (%v); want one session_id, c0", out.String(), err)
	}
	for _, tc := range []struct{ in, want string }{
		{"{\"input_length\":1,\"hash_ids\":[1]}\n{\"input_length\":1,\"hash_ids\":[1],\"session_id\":\"s\"}\n", "trace line 2: the row has a session_id already"},
		{"\n{\"input_length\":1,\"hash_ids\":[1]}\n{oops\n", "trace line 3: "},
		{"{\"input_length\":1,\"hash_ids\":[1]}\n{\"input_length\":1,\"hash_ids\":[" + strings.Repeat("1,", 3<<20) + "1]}\n", "trace line 2: longer than 4194304 bytes"},
	} {
		_, err := ChainSessions(strings.NewReader(tc.in), &bytes.Buffer{}, 512, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v; want one containing %q", err, tc.want)
		}
	}
}
