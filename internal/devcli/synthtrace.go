package devcli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/tracesynth"
)

func newSynthTraceCommand() *cobra.Command {
	o := tracesynth.Defaults()
	var out string
	cmd := &cobra.Command{
		Use:   "synth-trace [-o FILE]",
		Short: "Write a seeded synthetic Mooncake trace for kvhint preview",
		Long: `Write a synthetic trace in Mooncake's JSONL format (timestamp ms,
input_length, output_length, hash_ids one per block) with session_id on chat
turns: multi-turn chat sessions that share a few system prompts (each turn's
prompt is the previous prompt, its reply and a new message) and long
documents that several requests prefill and question. The same flags and
--seed write the same bytes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, err := tracesynth.Generate(o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out != "" && out != "-" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			if err := tracesynth.Write(w, rows); err != nil {
				return fmt.Errorf("writing the trace: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "file to write (default standard output)")
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
