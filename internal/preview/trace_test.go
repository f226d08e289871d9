package preview

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every kind of malformed row is an error that names its line; nothing is
// skipped.
func TestReadTraceMalformedRows(t *testing.T) {
	good := `{"timestamp":1,"input_length":1024,"output_length":10,"hash_ids":[1,2]}`
	for _, tc := range []struct {
		name, row, want string
	}{
		{"not JSON", `{"timestamp":`, "not a JSON object"},
		{"not an object", `[1,2]`, "not a JSON object"},
		{"unknown key", `{"timestamp":1,"input_length":1,"hash_ids":[1],"prompt":"hi"}`, `unknown key "prompt"`},
		{"agentic key", `{"timestamp":1,"input_length":1,"hash_ids":[1],"wait_for":["a"]}`, `"wait_for" is Dynamo's agentic`},
		{"no input length", `{"timestamp":1,"hash_ids":[1]}`, "input_length (or input_tokens) is required"},
		{"both aliases", `{"timestamp":1,"input_length":1,"input_tokens":1,"hash_ids":[1]}`, "both input_length and its alias input_tokens"},
		{"fractional length", `{"timestamp":1,"input_length":1.5,"hash_ids":[1]}`, "input_length is 1.5"},
		{"negative length", `{"timestamp":1,"input_length":-1}`, "input_length is -1"},
		{"negative output", `{"timestamp":1,"input_length":1,"output_length":-3,"hash_ids":[1]}`, "output_length is -3"},
		{"string timestamp", `{"timestamp":"x","input_length":1,"hash_ids":[1]}`, ""},
		{"negative timestamp", `{"timestamp":-5,"input_length":1,"hash_ids":[1]}`, "timestamp is -5"},
		{"no timestamp", `{"input_length":1,"hash_ids":[1]}`, "no timestamp"},
		{"timestamp goes back", `{"timestamp":0,"input_length":1,"hash_ids":[1]}`, "before the previous row"},
		{"too few hash ids", `{"timestamp":5,"input_length":1025,"hash_ids":[1,2]}`, "hash_ids has 2 ids; input_length 1025 at block size 512 needs 3"},
		{"too many hash ids", `{"timestamp":5,"input_length":10,"hash_ids":[1,2]}`, "hash_ids has 2 ids"},
		{"negative hash id", `{"timestamp":5,"input_length":10,"hash_ids":[-1]}`, "hash_ids[0] is -1"},
		{"hash id not a number", `{"timestamp":5,"input_length":10,"hash_ids":["a"]}`, "hash_ids: not a list of numbers"},
		{"empty session id", `{"timestamp":5,"input_length":10,"hash_ids":[1],"session_id":""}`, "session_id is empty"},
		{"bad session id", `{"timestamp":5,"input_length":10,"hash_ids":[1],"session_id":[1]}`, "session_id is [1]"},
		{"delay outside a session", `{"timestamp":5,"input_length":10,"hash_ids":[1],"delay_ms":3}`, "delay without session_id"},
		{"turn outside a session", `{"timestamp":5,"input_length":10,"hash_ids":[1],"turn":2}`, "turn 2 needs a session_id"},
		{"empty copy", `{"timestamp":5,"input_length":10,"role":"decode","worker":"w","committed_kv_copy":{"block_hashes":[]}}`, "committed_kv_copy.block_hashes is empty"},
		{"copy without role", `{"timestamp":5,"input_length":10,"committed_kv_copy":{"block_hashes":[1]}}`, "needs the role"},
		{"bad block size", `{"timestamp":5,"input_length":10,"block_size":0}`, "block_size is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace := good + "\n\n" + tc.row + "\n" + good + "\n"
			_, err := ReadTrace(strings.NewReader(trace), 512)
			var te *TraceError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v, want a *TraceError", err)
			}
			if te.Line != 3 {
				t.Errorf("line = %d, want 3 (%v)", te.Line, err)
			}
			if !strings.Contains(err.Error(), "trace line 3: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to name line 3 and contain %q", err, tc.want)
			}
		})
	}
}

func TestReadTraceSessionsAndAliases(t *testing.T) {
	trace := `{"created_time":0,"input_tokens":20,"output_tokens":3,"hash_ids":[1,2],"session_id":7}
{"timestamp":5,"input_length":30,"output_length":1,"hash_ids":[3,4,5],"session_id":"b"}
{"delay_ms":100,"input_length":30,"hash_ids":[1,2,6],"session_id":7}
{"timestamp":200,"input_length":10,"hash_ids":[9]}
`
	rows, err := ReadTrace(strings.NewReader(trace), 10)
	if err != nil {
		t.Fatal(err)
	}
	type r struct {
		Line    int
		At      float64
		In, Out int
		Session string
		Turn    int
		Final   bool
		ID      string
	}
	var got []r
	for _, x := range rows {
		got = append(got, r{x.Line, x.At, x.InputTokens, x.OutputTokens, x.Session, x.Turn, x.Final, x.RequestID})
	}
	want := []r{
		{1, 0, 20, 3, "7", 1, false, "line-1"},
		{2, 5, 30, 1, "b", 1, true, "line-2"},
		{3, 100, 30, 0, "7", 2, true, "line-3"},
		{4, 200, 10, 0, "", 0, false, "line-4"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
}
