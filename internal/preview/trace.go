package preview

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
)

// MaxTraceLineBytes caps one trace row: a row of 1M tokens at block size
// 16 holds 65,536 hash ids, about 1.3 MB in decimal.
const MaxTraceLineBytes = 4 << 20

// Reading limits of a row. They are the sidecar's booking limits
// (internal/sidecar/booking), so that a trace the sidecar recorded is
// always read, and a row preview refuses was never booked:
//
//   - MaxInputTokens bounds input_length and a booking's prompt_tokens.
//   - MaxBlockSize bounds block_size: no block holds more tokens than the
//     longest prompt, and the sums of the two stay far inside an int.
//   - MaxBlocksPerRow bounds a row's blocks, ceil(input_length /
//     block size), what the replay allocates and walks for it: the most
//     a kv-fetch may name (its max_blocks), twice the block hashes a
//     committed copy holds in the default 1 MiB booking body, and 16
//     times a 1M-token prompt at block size 16.
const (
	MaxInputTokens  = math.MaxInt32
	MaxBlockSize    = math.MaxInt32
	MaxBlocksPerRow = 1 << 20
)

// blocksOf is how many blocks of blockSize tokens hold tokens tokens,
// the last one partial; both are within the reading limits.
func blocksOf(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }

// Row is one request of a trace: Mooncake's fields (with the aliases and
// session fields Dynamo's replay reads) and, in a trace the sidecar
// recorded, what the router did with it.
type Row struct {
	// Line is the row's line number in the trace, from 1.
	Line int
	// RequestID is the row's request_id, or "line-N" when it has none.
	RequestID string
	// At is the arrival time in milliseconds from the trace's start.
	At float64
	// InputTokens and OutputTokens are the prompt and output lengths.
	InputTokens  int
	OutputTokens int
	// Hashes are the prompt's block ids, one per block (the last one may
	// be partial); nil when the row carries none (see blocksOf).
	Hashes []uint64
	// Session is the row's session ID, "" outside one; Turn counts from
	// 1 and Final marks the session's last row.
	Session string
	Turn    int
	Final   bool

	// The fields a recorded trace adds. Role is empty in a Mooncake row:
	// the row is booked for every role of the config.
	Role      string
	Worker    string
	BlockSize int
	Copy      *RecordedCopy
	Actions   []string
}

// RecordedCopy is the committed KV copy a recorded booking carried, as the
// recorder writes it (internal/sidecar/record): hints.CommittedCopy's JSON
// form, but its SourceEndpoint is a keyed hash of the booking's, not an
// address, so it is kept apart from the booking API's type.
type RecordedCopy struct {
	SourceWorker   string   `json:"source_worker,omitempty"`
	SourceEndpoint string   `json:"source_endpoint,omitempty"`
	SourceRank     int      `json:"source_rank,omitempty"`
	BlockHashes    []uint64 `json:"block_hashes"`
}

// rowJSON is a trace line as written: a Mooncake row, or one the
// recorder wrote, with the booking's fields flat beside it (not the
// booking API's body, pkg/bookingapi.Booking). Numbers that Mooncake writes as
// integers are read as json.Number so that a fraction or an exponent is an
// error, not a silent truncation.
type rowJSON struct {
	Timestamp    *json.Number    `json:"timestamp"`
	CreatedTime  *json.Number    `json:"created_time"`
	InputLength  *json.Number    `json:"input_length"`
	InputTokens  *json.Number    `json:"input_tokens"`
	OutputLength *json.Number    `json:"output_length"`
	OutputTokens *json.Number    `json:"output_tokens"`
	HashIDs      []json.Number   `json:"-"`
	SessionID    json.RawMessage `json:"session_id"`
	Delay        *json.Number    `json:"delay"`
	DelayMS      *json.Number    `json:"delay_ms"`
	RequestID    string          `json:"request_id"`

	Turn      *int          `json:"turn"`
	Final     *bool         `json:"final"`
	Role      string        `json:"role"`
	Worker    string        `json:"worker"`
	BlockSize *int          `json:"block_size"`
	Copy      *RecordedCopy `json:"committed_kv_copy"`
	Actions   []string      `json:"actions"`
}

// knownKeys are the keys a row may hold. Dynamo's agentic keys are named
// apart so that the error says they are not modelled rather than unknown.
var (
	knownKeys = map[string]bool{
		"timestamp": true, "created_time": true, "input_length": true, "input_tokens": true,
		"output_length": true, "output_tokens": true, "hash_ids": true, "session_id": true,
		"delay": true, "delay_ms": true, "request_id": true,
		"turn": true, "final": true, "role": true, "worker": true, "block_size": true,
		"committed_kv_copy": true, "actions": true,
	}
	agenticKeys = map[string]bool{"wait_for": true, "branches": true, "prefix_reset": true, "tool_wait_ms": true}
)

// TraceError is a trace row that cannot be read: the line and what is
// wrong with it.
type TraceError struct {
	Line int
	Msg  string
}

func (e *TraceError) Error() string { return fmt.Sprintf("trace line %d: %s", e.Line, e.Msg) }

// ReadTrace reads a JSONL trace: Mooncake rows, Dynamo replay's aliases
// and session fields, or a trace the sidecar recorded. Every row is
// checked; the first bad one is an error that names its line, and no row
// is skipped. blockSize is the number of tokens per hash id (Mooncake's
// files use 512); a recorded row's own block_size overrides it. Blank
// lines are allowed.
func ReadTrace(r io.Reader, blockSize int) ([]Row, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("trace block size is %d; it must be above 0", blockSize)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxTraceLineBytes)
	var rows []Row
	type sessionState struct {
		turn   int
		at     float64
		lastIx int
	}
	sessions := map[string]*sessionState{}
	explicitFinal := map[string]bool{}
	line := 0
	lastAt := 0.0
	anyDelayed := false
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		row, err := parseRow(b, line, blockSize)
		if err != nil {
			return nil, err
		}
		if row.Session != "" {
			st := sessions[row.Session]
			if st == nil {
				st = &sessionState{}
				sessions[row.Session] = st
			} else if last := rows[st.lastIx]; last.Final && !(last.RequestID == row.RequestID && row.Role != "") {
				return nil, &TraceError{line, fmt.Sprintf("session %q has a row after its final turn (line %d)", row.Session, last.Line)}
			}
			// A recorded trace has a row per role booked, so a turn may
			// repeat; it never goes back.
			switch {
			case row.Turn == 0:
				st.turn++
				row.Turn = st.turn
			case row.Turn < st.turn:
				return nil, &TraceError{line, fmt.Sprintf("turn is %d; session %q is already at turn %d", row.Turn, row.Session, st.turn)}
			default:
				st.turn = row.Turn
			}
			if row.delayed && !row.hasTime {
				row.At, row.hasTime = st.at+row.delay, true
				anyDelayed = true
			}
			st.at = row.At
			st.lastIx = len(rows)
			if row.explicitFinal {
				explicitFinal[row.Session] = true
			}
		} else if row.delayed {
			return nil, &TraceError{line, "delay without session_id: a delay spaces a session's turns"}
		}
		if !row.hasTime {
			return nil, &TraceError{line, "no timestamp (or created_time), and no session delay to place the row"}
		}
		if !row.delayed {
			if row.At < lastAt {
				return nil, &TraceError{line, fmt.Sprintf("timestamp %g ms is before the previous row's %g ms; a trace is in arrival order", row.At, lastAt)}
			}
			lastAt = row.At
		}
		rows = append(rows, row.Row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &TraceError{line + 1, fmt.Sprintf("longer than %d bytes", MaxTraceLineBytes)}
		}
		return nil, fmt.Errorf("reading the trace after line %d: %w", line, err)
	}
	// A session's last row is its final turn, unless the trace says which
	// rows are final itself (a recorded trace).
	for id, st := range sessions {
		if !explicitFinal[id] {
			rows[st.lastIx].Final = true
		}
	}
	if anyDelayed {
		// Turns placed by their delay arrive among the others.
		slices.SortStableFunc(rows, func(a, b Row) int { return cmp.Compare(a.At, b.At) })
	}
	return rows, nil
}

type parsedRow struct {
	Row
	hasTime       bool
	delayed       bool
	delay         float64
	explicitFinal bool
}

func parseRow(b []byte, line, blockSize int) (parsedRow, error) {
	fail := func(format string, args ...any) (parsedRow, error) {
		return parsedRow{}, &TraceError{line, fmt.Sprintf(format, args...)}
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return fail("not a JSON object: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if agenticKeys[k] {
			return fail("key %q is Dynamo's agentic trace format, which preview does not model", k)
		}
		if !knownKeys[k] {
			return fail("unknown key %q", k)
		}
	}
	var j rowJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return fail("%v", err)
	}
	if raw, ok := keys["hash_ids"]; ok {
		if err := json.Unmarshal(raw, &j.HashIDs); err != nil {
			return fail("hash_ids: not a list of numbers: %v", err)
		}
		if j.HashIDs == nil {
			j.HashIDs = []json.Number{}
		}
	}
	p := parsedRow{Row: Row{Line: line, RequestID: j.RequestID, Role: j.Role, Worker: j.Worker, Copy: j.Copy, Actions: j.Actions}}
	if p.RequestID == "" {
		p.RequestID = "line-" + strconv.Itoa(line)
	}
	ts, err := oneOf("timestamp", j.Timestamp, "created_time", j.CreatedTime, false)
	if err != nil {
		return fail("%v", err)
	}
	if ts != nil {
		p.hasTime = true
		p.At = *ts
	}
	in, err := oneOf("input_length", j.InputLength, "input_tokens", j.InputTokens, true)
	if err != nil {
		return fail("%v", err)
	}
	if in == nil {
		return fail("input_length (or input_tokens) is required")
	}
	p.InputTokens = int(*in)
	out, err := oneOf("output_length", j.OutputLength, "output_tokens", j.OutputTokens, true)
	if err != nil {
		return fail("%v", err)
	}
	if out != nil {
		p.OutputTokens = int(*out)
	}
	d, err := oneOf("delay", j.Delay, "delay_ms", j.DelayMS, false)
	if err != nil {
		return fail("%v", err)
	}
	if d != nil {
		p.delayed, p.delay = true, *d
	}
	if len(j.SessionID) > 0 && string(j.SessionID) != "null" {
		var s string
		var n json.Number
		switch {
		case json.Unmarshal(j.SessionID, &s) == nil:
		case json.Unmarshal(j.SessionID, &n) == nil:
			s = n.String()
		default:
			return fail("session_id is %s; it must be a string or a number", j.SessionID)
		}
		if s == "" {
			return fail("session_id is empty")
		}
		p.Session = s
	}
	if j.BlockSize != nil {
		if *j.BlockSize <= 0 || *j.BlockSize > MaxBlockSize {
			return fail("block_size is %d; it must be from 1 to %d", *j.BlockSize, MaxBlockSize)
		}
		p.BlockSize = *j.BlockSize
		blockSize = *j.BlockSize
	}
	if j.Turn != nil {
		if p.Session == "" || *j.Turn < 1 {
			return fail("turn %d needs a session_id and counts from 1", *j.Turn)
		}
		p.Turn = *j.Turn
	}
	if j.Final != nil {
		if p.Session == "" {
			return fail("final needs a session_id")
		}
		p.Final, p.explicitFinal = *j.Final, true
	}
	if blockSize > MaxBlockSize {
		return fail("the trace block size is %d; it must be at most %d", blockSize, MaxBlockSize)
	}
	if n := blocksOf(p.InputTokens, blockSize); n > MaxBlocksPerRow {
		return fail("input_length %d at block size %d is %d blocks, over the %d a row may hold (the sidecar's limit on a booking's blocks)",
			p.InputTokens, blockSize, n, MaxBlocksPerRow)
	}
	if c := p.Copy; c != nil && len(c.BlockHashes) > MaxBlocksPerRow {
		return fail("committed_kv_copy.block_hashes has %d hashes, over the %d a row may hold", len(c.BlockHashes), MaxBlocksPerRow)
	}
	if j.HashIDs != nil {
		want := blocksOf(p.InputTokens, blockSize)
		if len(j.HashIDs) != want {
			return fail("hash_ids has %d ids; input_length %d at block size %d needs %d (one per block, the last may be partial; see --trace-block-size)",
				len(j.HashIDs), p.InputTokens, blockSize, want)
		}
		p.Hashes = make([]uint64, len(j.HashIDs))
		for i, n := range j.HashIDs {
			v, err := strconv.ParseUint(n.String(), 10, 64)
			if err != nil {
				return fail("hash_ids[%d] is %s; ids are integers in [0, 2^64)", i, n)
			}
			p.Hashes[i] = v
		}
	}
	if c := p.Copy; c != nil && len(c.BlockHashes) == 0 {
		return fail("committed_kv_copy.block_hashes is empty")
	}
	if p.Copy != nil && p.Role == "" {
		return fail("committed_kv_copy needs the role it was booked for")
	}
	if p.Worker != "" && p.Role == "" {
		return fail("worker needs the role it was booked for")
	}
	return p, nil
}

// oneOf reads a field that has an alias: at most one of the two may be
// given, and the value must be a finite number at least 0 (an integer when
// integer is set).
func oneOf(name string, a *json.Number, alias string, b *json.Number, integer bool) (*float64, error) {
	if a != nil && b != nil {
		return nil, fmt.Errorf("both %s and its alias %s are given", name, alias)
	}
	if a == nil {
		a, name = b, alias
	}
	if a == nil {
		return nil, nil
	}
	if integer {
		v, err := strconv.ParseInt(a.String(), 10, 64)
		if err != nil || v < 0 || v > MaxInputTokens {
			return nil, fmt.Errorf("%s is %s; it must be a whole number from 0 to %d", name, a, MaxInputTokens)
		}
		f := float64(v)
		return &f, nil
	}
	v, err := a.Float64()
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return nil, fmt.Errorf("%s is %s; it must be a number of milliseconds, 0 or more", name, a)
	}
	return &v, nil
}
