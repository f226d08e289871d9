package tracesynth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ChainSessions gives a session-less Mooncake trace the session ids of a
// Dynamo session trace: a row continues the session whose latest row's
// whole blocks are a prefix of its own ids (at least minBlocks of them;
// the longest such prefix wins), else it starts a session. A session
// continues at most once from each row, so a prefix several requests share
// (a system prompt) does not merge them. It returns how many sessions it
// made. Rows keep their keys and order; session_id ("c" and a number) is
// added, and a row that has one is an error.
func ChainSessions(r io.Reader, w io.Writer, blockSize, minBlocks int) (int, error) {
	if blockSize <= 0 || minBlocks < 1 {
		return 0, fmt.Errorf("chain sessions: block size %d and minimum prefix %d must be above 0", blockSize, minBlocks)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	bw := bufio.NewWriterSize(w, 64<<10)
	tails := map[string]int{}
	sessions, line := 0, 0
	var key strings.Builder
	prefixKey := func(ids []uint64, n int) string {
		key.Reset()
		for _, id := range ids[:n] {
			key.WriteString(strconv.FormatUint(id, 36))
			key.WriteByte(',')
		}
		return key.String()
	}
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var row struct {
			InputLength *int            `json:"input_length"`
			HashIDs     []uint64        `json:"hash_ids"`
			Session     json.RawMessage `json:"session_id"`
		}
		if err := json.Unmarshal(b, &row); err != nil {
			return 0, fmt.Errorf("trace line %d: %v", line, err)
		}
		if row.Session != nil {
			return 0, fmt.Errorf("trace line %d: the row has a session_id already", line)
		}
		if row.InputLength == nil {
			return 0, fmt.Errorf("trace line %d: no input_length", line)
		}
		s := -1
		for k := len(row.HashIDs); k >= minBlocks; k-- {
			pk := prefixKey(row.HashIDs, k)
			if id, ok := tails[pk]; ok {
				s = id
				delete(tails, pk)
				break
			}
		}
		if s < 0 {
			s = sessions
			sessions++
		}
		if whole := min(*row.InputLength/blockSize, len(row.HashIDs)); whole >= minBlocks {
			tails[prefixKey(row.HashIDs, whole)] = s
		}
		end := strings.LastIndexByte(string(b), '}')
		if end < 0 {
			return 0, fmt.Errorf("trace line %d: not a JSON object", line)
		}
		bw.Write(b[:end])
		bw.WriteString(`,"session_id":"c` + strconv.Itoa(s) + `"}` + "\n")
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return sessions, bw.Flush()
}

// MooncakeDir finds the directory of the real Mooncake traces for tests:
// $KVHINT_MOONCAKE_DIR, else the first shared/data/mooncake found walking
// up from the working directory. It returns "" and the places it looked
// when there is none.
func MooncakeDir() (string, string) {
	if d := os.Getenv("KVHINT_MOONCAKE_DIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "conversation_trace.jsonl")); err == nil {
			return d, ""
		}
		return "", "KVHINT_MOONCAKE_DIR=" + d + " holds no conversation_trace.jsonl"
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err.Error()
	}
	for {
		d := filepath.Join(dir, "shared", "data", "mooncake")
		if _, err := os.Stat(filepath.Join(d, "conversation_trace.jsonl")); err == nil {
			return d, ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "no shared/data/mooncake/conversation_trace.jsonl above the working directory, and KVHINT_MOONCAKE_DIR is unset"
		}
		dir = parent
	}
}
