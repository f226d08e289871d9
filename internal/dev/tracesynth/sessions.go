package tracesynth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// ChainSessions gives a session-less Mooncake trace the session ids of a
// Dynamo session trace: a row continues the session whose latest row's
// whole blocks are a prefix of its own ids (at least minBlocks of them;
// the longest such prefix wins), else it starts a session. A session
// continues at most once from each row, so a prefix several requests share
// (a system prompt) does not merge them. It returns how many sessions it
// made. Rows keep their keys and order; session_id ("c" and a number) is
// added. A row whose session_id is null gets one too (its keys are then
// written in name order); a row that has one is an error.
//
// Each row costs time in its number of ids: prefixes are looked up by a
// 128-bit hash of their ids, grown one id at a time.
func ChainSessions(r io.Reader, w io.Writer, blockSize, minBlocks int) (int, error) {
	if blockSize <= 0 || minBlocks < 1 {
		return 0, fmt.Errorf("chain sessions: block size %d and minimum prefix %d must be above 0", blockSize, minBlocks)
	}
	const maxLine = 4 << 20
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	bw := bufio.NewWriterSize(w, 64<<10)
	tails := map[prefixKey]int{}
	sessions, line := 0, 0
	var keys []prefixKey
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
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
		null := string(row.Session) == "null"
		if row.Session != nil && !null {
			return 0, fmt.Errorf("trace line %d: the row has a session_id already", line)
		}
		if row.InputLength == nil {
			return 0, fmt.Errorf("trace line %d: no input_length", line)
		}
		keys = prefixKeys(keys[:0], row.HashIDs)
		s := -1
		for k := len(row.HashIDs); k >= minBlocks; k-- {
			if id, ok := tails[keys[k-1]]; ok {
				s = id
				delete(tails, keys[k-1])
				break
			}
		}
		if s < 0 {
			s = sessions
			sessions++
		}
		if whole := min(*row.InputLength/blockSize, len(row.HashIDs)); whole >= minBlocks {
			tails[keys[whole-1]] = s
		}
		id := "c" + strconv.Itoa(s)
		if null {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(b, &fields); err != nil {
				return 0, fmt.Errorf("trace line %d: %v", line, err)
			}
			fields["session_id"] = json.RawMessage(strconv.Quote(id))
			out, err := json.Marshal(fields)
			if err != nil {
				return 0, fmt.Errorf("trace line %d: %v", line, err)
			}
			bw.Write(out)
			bw.WriteByte('\n')
			continue
		}
		end := bytes.LastIndexByte(b, '}')
		if end < 0 {
			return 0, fmt.Errorf("trace line %d: not a JSON object", line)
		}
		bw.Write(b[:end])
		bw.WriteString(`,"session_id":"` + id + `"}` + "\n")
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return 0, fmt.Errorf("trace line %d: longer than %d bytes", line+1, maxLine)
		}
		return 0, fmt.Errorf("trace line %d: %w", line+1, err)
	}
	return sessions, bw.Flush()
}

// prefixKey names the prefix of a row's ids: its length and two 64-bit
// hashes of its ids, so that unequal prefixes collide with odds of about
// 2^-128 a pair.
type prefixKey struct {
	n    int
	a, b uint64
}

// prefixKeys appends to dst the key of every prefix of ids, the prefix of
// k ids at index k-1, each grown from the one before.
func prefixKeys(dst []prefixKey, ids []uint64) []prefixKey {
	var a, b uint64 = 14695981039346656037, 0x9e3779b97f4a7c15 // FNV offset basis; the golden ratio
	for i, id := range ids {
		a = (a ^ id) * 1099511628211 // FNV-1a's prime, a word at a time
		b = mix64(b ^ mix64(id+uint64(i)))
		dst = append(dst, prefixKey{n: i + 1, a: a, b: b})
	}
	return dst
}

// mix64 is SplitMix64's finalizer: every bit of x moves every bit of the
// result.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
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
