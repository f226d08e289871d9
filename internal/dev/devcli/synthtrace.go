package devcli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/dev/tracesynth"
)

func newSynthTraceCommand() *cobra.Command {
	o := tracesynth.Defaults()
	var out, format string
	cmd := &cobra.Command{
		Use:   "synth-trace [-o FILE]",
		Short: "Write a seeded synthetic Mooncake trace for kvhint preview",
		Long: `Write a synthetic trace in Mooncake's JSONL format (timestamp ms,
input_length, output_length, hash_ids one per block) with session_id on chat
turns: multi-turn chat sessions that share a few system prompts (each turn's
prompt is the previous prompt, its reply and a new message) and long
documents that several requests prefill and question. The same flags and
--seed write the same bytes.

--format dynamo writes the same requests as a Dynamo session trace: a
session's first turn carries its timestamp, each later turn a delay in ms
after the previous turn's arrival (kvhint preview's reading of delay) and no
timestamp.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, err := tracesynth.Generate(o)
			if err != nil {
				return err
			}
			return writeOutput(cmd, out, func(w io.Writer) error {
				if err := tracesynth.WriteFormat(w, rows, format); err != nil {
					return fmt.Errorf("writing the trace: %w", err)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "file to write (default standard output)")
	f.StringVar(&format, "format", tracesynth.FormatMooncake, "trace format: mooncake (a timestamp on every row) or dynamo (a session's later turns by delay)")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "seed of every draw")
	f.IntVar(&o.Rows, "rows", o.Rows, "requests in the trace")
	f.IntVar(&o.BlockSize, "block-size", o.BlockSize, "tokens per hash id")
	f.Float64Var(&o.RatePerSecond, "rate", o.RatePerSecond, "new sessions and documents per second (Poisson)")
	f.IntVar(&o.SystemPrompts, "system-prompts", o.SystemPrompts, "distinct system prompts the chats share")
	f.IntVar(&o.SystemPromptBlocks, "system-prompt-blocks", o.SystemPromptBlocks, "length of a system prompt, in blocks")
	f.IntVar(&o.MaxTurns, "max-turns", o.MaxTurns, "longest chat, in turns")
	f.IntVar(&o.UserBlocks, "user-blocks", o.UserBlocks, "most blocks a turn's message adds")
	f.Float64Var(&o.ThinkMS, "think-ms", o.ThinkMS, "mean milliseconds between a session's turns")
	f.IntVar(&o.OutputTokens, "output-tokens", o.OutputTokens, "longest reply, in tokens")
	f.Float64Var(&o.DocShare, "doc-share", o.DocShare, "share of arrivals that are long documents")
	f.IntVar(&o.DocBlocks, "doc-blocks", o.DocBlocks, "length of a document, in blocks")
	f.IntVar(&o.DocQuestions, "doc-questions", o.DocQuestions, "requests on each document")
	return cmd
}

func newChainSessionsCommand() *cobra.Command {
	var in, out string
	blockSize, minBlocks := 512, 2
	cmd := &cobra.Command{
		Use:   "chain-sessions --input FILE [-o FILE]",
		Short: "Give a session-less Mooncake trace session ids from its shared prefixes",
		Long: `Add a session_id to every row of a Mooncake trace that has none (the
published FAST'25 traces): a row continues the session whose latest row's
whole blocks are a prefix of its own hash_ids (at least --min-blocks of
them; the longest wins), else it starts one. A session continues at most
once from each row, so a system prompt every row shares does not merge
them. kvhint preview can then exercise kv-retain and kv-evict, which act
only within a session. The rows keep their order and keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" {
				return fmt.Errorf("--input is required")
			}
			r, err := os.Open(in)
			if err != nil {
				return err
			}
			defer r.Close()
			var n int
			err = writeOutput(cmd, out, func(w io.Writer) error {
				var err error
				if n, err = tracesynth.ChainSessions(r, w, blockSize, minBlocks); err != nil {
					return fmt.Errorf("%s: %w", in, err)
				}
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d sessions\n", n)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&in, "input", "", "the Mooncake trace to read")
	f.StringVarP(&out, "output", "o", "", "file to write (default standard output)")
	f.IntVar(&blockSize, "block-size", blockSize, "tokens per hash id")
	f.IntVar(&minBlocks, "min-blocks", minBlocks, "the fewest shared blocks that continue a session")
	return cmd
}

// writeOutput runs write on standard output, or on the file out (not "-")
// when set. A file is closed before it counts as written: an error of the
// write or of the close (a full disk shows there) is returned and the
// partial file removed, so no half-written trace is left to read.
func writeOutput(cmd *cobra.Command, out string, write func(io.Writer) error) error {
	if out == "" || out == "-" {
		return write(cmd.OutOrStdout())
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	// Only a regular file is removed on failure: out may be a device or
	// a pipe (-o /dev/stdout).
	st, serr := f.Stat()
	regular := serr == nil && st.Mode().IsRegular()
	err = write(f)
	if cerr := f.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("closing %s: %w", out, cerr))
	}
	if err != nil && regular {
		os.Remove(out)
	}
	return err
}
