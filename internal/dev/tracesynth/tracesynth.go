// Package tracesynth writes seeded synthetic traces in Mooncake's JSONL
// format or as Dynamo session traces, with session_id on chat turns, for
// kvhint preview's tests, demos and benchmark; it also gives a real
// session-less Mooncake trace session ids (ChainSessions) and finds the
// real traces for tests (MooncakeDir). The synthetic traces hold
// multi-turn chat sessions that share a few system prompts, and long
// documents that several requests prefill and question. It is a
// development tool (kvhint-dev synth-trace and chain-sessions); it imports
// nothing of the product.
package tracesynth

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Options shape a trace. Zero values take the defaults of Defaults.
type Options struct {
	// Seed seeds every draw: the same options write the same bytes.
	Seed uint64
	// Rows is the number of requests.
	Rows int
	// BlockSize is the tokens per hash id.
	BlockSize int
	// RatePerSecond is the mean arrival rate of new sessions and
	// documents (Poisson).
	RatePerSecond float64
	// SystemPrompts is the number of distinct system prompts chats share;
	// SystemPromptBlocks their length in blocks.
	SystemPrompts      int
	SystemPromptBlocks int
	// MaxTurns is the longest chat; turns are drawn from 1..MaxTurns.
	MaxTurns int
	// UserBlocks is the most blocks a turn adds (drawn from 1..UserBlocks).
	UserBlocks int
	// ThinkMS is the mean time between a session's turns.
	ThinkMS float64
	// OutputTokens is the most tokens a reply has (drawn uniformly).
	OutputTokens int
	// DocShare is the share of arrivals that are long documents;
	// DocBlocks their length, DocQuestions the requests on each.
	DocShare     float64
	DocBlocks    int
	DocQuestions int
}

// Defaults returns the options a bare `kvhint-dev synth-trace` uses.
func Defaults() Options {
	return Options{Seed: 1, Rows: 1000, BlockSize: 512, RatePerSecond: 20, SystemPrompts: 4, SystemPromptBlocks: 4,
		MaxTurns: 6, UserBlocks: 2, ThinkMS: 5000, OutputTokens: 400, DocShare: 0.1, DocBlocks: 32, DocQuestions: 3}
}

// Row is one request of the trace.
type Row struct {
	TimestampMS  int64
	InputTokens  int
	OutputTokens int
	Hashes       []uint64
	Session      string
}

// Generate returns the trace's rows in arrival order.
func Generate(o Options) ([]Row, error) {
	if o.Rows < 0 || o.BlockSize <= 0 || o.RatePerSecond <= 0 || o.SystemPrompts < 1 || o.SystemPromptBlocks < 0 ||
		o.MaxTurns < 1 || o.UserBlocks < 1 || o.ThinkMS < 0 || o.OutputTokens < 1 || o.DocShare < 0 || o.DocShare > 1 ||
		o.DocBlocks < 1 || o.DocQuestions < 1 {
		return nil, fmt.Errorf("synth-trace: options out of range: %+v", o)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7ace))
	next := uint64(0)
	newIDs := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = next
			next++
		}
		return out
	}
	systems := make([][]uint64, o.SystemPrompts)
	for i := range systems {
		systems[i] = newIDs(o.SystemPromptBlocks)
	}
	type pending struct {
		row Row
		seq int
	}
	var rows []pending
	seq := 0
	add := func(r Row) {
		rows = append(rows, pending{r, seq})
		seq++
	}
	// partial makes a prompt's last block partial, as real prompts are.
	partial := func(blocks int) int { return blocks*o.BlockSize - rng.IntN(o.BlockSize/2+1) }
	t := 0.0
	sessions := 0
	for len(rows) < o.Rows {
		t += rng.ExpFloat64() * 1000 / o.RatePerSecond
		if rng.Float64() < o.DocShare {
			doc := newIDs(o.DocBlocks)
			at := t
			for q := 0; q < o.DocQuestions && len(rows) < o.Rows; q++ {
				hashes := append(slices.Clone(doc), newIDs(1)...)
				add(Row{TimestampMS: int64(at), InputTokens: partial(len(hashes)), OutputTokens: 1 + rng.IntN(o.OutputTokens), Hashes: hashes})
				at += rng.ExpFloat64() * o.ThinkMS / 4
			}
			continue
		}
		sessions++
		id := "s" + strconv.Itoa(sessions)
		prompt := slices.Clone(systems[rng.IntN(len(systems))])
		turns := 1 + rng.IntN(o.MaxTurns)
		at := t
		for k := 0; k < turns && len(rows) < o.Rows; k++ {
			prompt = append(prompt, newIDs(1+rng.IntN(o.UserBlocks))...)
			out := 1 + rng.IntN(o.OutputTokens)
			add(Row{TimestampMS: int64(at), InputTokens: partial(len(prompt)), OutputTokens: out, Hashes: slices.Clone(prompt), Session: id})
			// The reply joins the next turn's prompt: its whole blocks get
			// new ids after the partial block, which changes.
			prompt = append(prompt[:len(prompt)-1], newIDs(1+out/o.BlockSize)...)
			at += o.ThinkMS/2 + rng.ExpFloat64()*o.ThinkMS/2
		}
	}
	slices.SortStableFunc(rows, func(a, b pending) int {
		if a.row.TimestampMS != b.row.TimestampMS {
			if a.row.TimestampMS < b.row.TimestampMS {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
	out := make([]Row, len(rows))
	for i, p := range rows {
		out[i] = p.row
	}
	return out, nil
}

// The formats Write can write.
const (
	// FormatMooncake gives every row its timestamp.
	FormatMooncake = "mooncake"
	// FormatDynamo is a Dynamo session trace: a session's first turn has
	// its timestamp, each later turn a delay (ms) after the previous
	// turn's arrival, and no timestamp.
	FormatDynamo = "dynamo"
)

// Write writes rows as Mooncake JSONL, keys in a fixed order.
func Write(w io.Writer, rows []Row) error { return WriteFormat(w, rows, FormatMooncake) }

// WriteFormat writes rows as JSONL in format, keys in a fixed order.
func WriteFormat(w io.Writer, rows []Row, format string) error {
	if format != FormatMooncake && format != FormatDynamo {
		return fmt.Errorf("trace format %q: it must be %s or %s", format, FormatMooncake, FormatDynamo)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	buf := make([]byte, 0, 1024)
	lastAt := map[string]int64{}
	for _, r := range rows {
		buf = buf[:0]
		prev, later := lastAt[r.Session]
		if format == FormatDynamo && r.Session != "" && later {
			buf = append(buf, `{"delay":`...)
			buf = strconv.AppendInt(buf, r.TimestampMS-prev, 10)
		} else {
			buf = append(buf, `{"timestamp":`...)
			buf = strconv.AppendInt(buf, r.TimestampMS, 10)
		}
		if r.Session != "" {
			lastAt[r.Session] = r.TimestampMS
		}
		buf = append(buf, `,"input_length":`...)
		buf = strconv.AppendInt(buf, int64(r.InputTokens), 10)
		buf = append(buf, `,"output_length":`...)
		buf = strconv.AppendInt(buf, int64(r.OutputTokens), 10)
		buf = append(buf, `,"hash_ids":[`...)
		for i, h := range r.Hashes {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendUint(buf, h, 10)
		}
		buf = append(buf, ']')
		if r.Session != "" {
			buf = append(buf, `,"session_id":`...)
			buf = strconv.AppendQuote(buf, r.Session)
		}
		buf = append(buf, "}\n"...)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}
