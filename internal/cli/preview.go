package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/filecheck"
	"github.com/kvrouter/kv-hint-operator/internal/preview"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Exit codes of kvhint preview. 0 to 2 are as argocd app diff and deck
// diff use them; 3 is a verdict the trace cannot give.
const (
	PreviewSame       = 0
	PreviewDiffers    = 1
	PreviewError      = 2
	PreviewCannotTell = 3
)

type previewFlags struct {
	trace, base, head, router string
	mode                      hintsconfig.RouterMode
	catalogFile               string
	budget                    *declared.Budget
	output                    string
	topology                  string
	choices                   string
	evictInUse                string
	cacheTokens               int
	cacheBlocksSet            bool
	plot                      string
	a                         preview.Assumptions
}

func newPreviewCommand(cat *hints.Catalog) *cobra.Command {
	f := previewFlags{a: preview.DefaultAssumptions()}
	cmd := &cobra.Command{
		Use:   "preview --trace FILE --base PATH --head PATH",
		Short: "Replay a trace of bookings through two configs and report what the change does, per role",
		Long: `Replay a trace's bookings through two hints configs and report, per role, what
the change does: how many bookings get each action, which bookings' actions
change, fetched blocks used and wasted, the block-weighted prefix hit ratio,
prefill tokens computed, retained blocks reused or expired, evicted blocks
asked for again, and a TTFT estimate.

--base and --head are what kvhint compile -f reads: a hints YAML file, or
manifests of RouterRoles and HintPolicies (a file or a directory), with
--router NAME when they hold several routers. Each config runs in the real
dispatcher; the rest is a deterministic model: the router's worker choice
by each role's worker selection and its parameters, the workers of each
role (--workers, --cache-blocks or --cache-tokens, or --topology FILE) and
a KV block cache per worker, reference-counted by default (--evict-in-use
keep: kv.evict leaves a block another active request reads). The engine's
block size (--engine-block-size) is apart from the trace's tokens per id
(--trace-block-size): block counts are the engine's. Its assumptions are
flags, and every report lists them.

The trace is JSONL: Mooncake's rows (timestamp ms, input_length,
output_length, hash_ids one per block of --trace-block-size tokens), with
the aliases and session fields of Dynamo's replay (created_time,
input_tokens, output_tokens, session_id, delay/delay_ms), or a trace the
sidecar recorded (kvhint sidecar --record-trace), which also carries each booking's role, worker, committed copy and
actions (--choices recorded replays its workers and copies). See
docs/preview.md.

The report opens with a verdict: improves, worsens, no difference, or cannot
tell. It reads the prefix hit ratio over all roles and the mean TTFT estimate
a user waits on (end to end for a disaggregated router), replays the change again at half and twice the
workers and the cache (--sensitivity=false skips that), and cuts the trace
into --windows time windows for an interval. The verdict is "cannot tell"
when the two figures disagree, when the sign is not the same across the strip,
when the window interval spans zero, or when no row of the trace can exercise
the change (a kv-retain or kv-evict change on a trace without session ids, a
role with no booking, an empty trace); a warning on standard error says why.

Exit status: 0 no difference, 1 the change improves or worsens, 2 an error
(a trace row that cannot be read names its line), 3 cannot tell.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.cacheBlocksSet = cmd.Flags().Changed("cache-blocks")
			code := runPreview(cat, &f, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			if code == PreviewSame {
				return nil
			}
			return exitError{code: code}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "the trace, JSONL (- for stdin)")
	fl.StringVar(&f.base, "base", "", "the config before the change: what kvhint compile -f reads")
	fl.StringVar(&f.head, "head", "", "the config after the change: what kvhint compile -f reads")
	fl.StringVar(&f.router, "router", "", "the router whose config to preview, when the manifests hold several")
	fl.Var(routerModeFlag{&f.mode}, "router-mode", "the router's mode for every role of a hints YAML file: "+hintsconfig.RouterModeList())
	f.budget = addCatalogFlag(cmd, &f.catalogFile)
	fl.StringVarP(&f.output, "output", "o", "md", "report format: md or json")
	fl.IntVar(&f.a.BlockSize, "trace-block-size", preview.DefaultBlockSize, "tokens per hash id in the trace")
	fl.IntVar(&f.a.EngineBlockSize, "engine-block-size", 0, "the engine's KV block size in tokens: the bookings' block size and the unit of min_blocks, max_blocks and --cache-blocks; it divides --trace-block-size (default: --trace-block-size)")
	fl.IntVar(&f.cacheTokens, "cache-tokens", 0, "KV cache capacity of each worker, in tokens, rounded down to whole engine blocks (instead of --cache-blocks)")
	fl.IntVar(&f.a.Topology.Default.Workers, "workers", preview.DefaultWorkers, "workers per role")
	fl.IntVar(&f.a.Topology.Default.CacheBlocks, "cache-blocks", preview.DefaultCacheBlocks, "KV cache capacity of each worker, in engine blocks")
	fl.StringVar(&f.topology, "topology", "", "YAML file of workers per role (default, roles: {workers, cache_blocks, hint_capable, source_endpoints}); overrides --workers and --cache-blocks where it sets them")
	fl.Float64Var(&f.a.PrefillMSPerToken, "prefill-ms-per-token", preview.DefaultPrefillMSPerToken, "TTFT model: milliseconds to compute one prompt token")
	fl.Float64Var(&f.a.FetchMSPerBlock, "fetch-ms-per-block", preview.DefaultFetchMSPerBlock, "TTFT model: milliseconds to bring one block by kv.fetch")
	fl.Float64Var(&f.a.DecodeMSPerToken, "decode-ms-per-token", preview.DefaultDecodeMSPerToken, "completion model: milliseconds per output token")
	fl.Uint64Var(&f.a.Seed, "seed", preview.DefaultSeed, "seed of the selections that draw at random")
	fl.StringVar(&f.choices, "choices", "model", "worker choice: model (the selection model) or recorded (a recorded trace's workers and copies)")
	fl.BoolVar(&f.a.Sensitivity, "sensitivity", true, "replay the change again at 1/2x and 2x workers and cache (four more pairs of replays)")
	fl.IntVar(&f.a.Windows, "windows", preview.DefaultWindows, "time windows the trace is cut into for the interval of the headline deltas (0 or 1: none)")
	fl.StringVar(&f.plot, "plot", "", "also write an SVG plot of the per-window deltas to this file")
	fl.StringVar(&f.evictInUse, "evict-in-use", string(preview.DefaultEvictInUse), "what kv.evict does to a block another active request on the worker reads: keep (reference-counted, as vLLM and SGLang), free, or oracle (keep, and blocks a later row reads stay too: an upper bound, not an engine)")
	return cmd
}

func runPreview(cat *hints.Catalog, f *previewFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "kvhint preview: "+format+"\n", args...)
		return PreviewError
	}
	switch {
	case f.trace == "":
		return fail("--trace is required")
	case f.base == "" || f.head == "":
		return fail("--base and --head are required")
	case f.output != "md" && f.output != "json":
		return fail("--output is %q; it must be md or json", f.output)
	case f.a.BlockSize <= 0:
		return fail("--trace-block-size is %d; it must be above 0", f.a.BlockSize)
	case f.a.Topology.Default.Workers < 1:
		return fail("--workers is %d; it must be at least 1", f.a.Topology.Default.Workers)
	case f.a.Topology.Default.CacheBlocks < 0:
		return fail("--cache-blocks is %d; it must be 0 or more", f.a.Topology.Default.CacheBlocks)
	case f.a.EngineBlockSize < 0 || f.a.EngineBlockSize > f.a.BlockSize || f.a.EngineBlockSize > 0 && f.a.BlockSize%f.a.EngineBlockSize != 0:
		return fail("--engine-block-size is %d; it must divide --trace-block-size %d (an engine block is a part of a trace block, and a trace block a run of engine blocks)", f.a.EngineBlockSize, f.a.BlockSize)
	case f.cacheTokens < 0:
		return fail("--cache-tokens is %d; it must be 0 or more", f.cacheTokens)
	case f.cacheTokens > 0 && f.cacheBlocksSet:
		return fail("--cache-tokens and --cache-blocks give the same capacity: give one")
	case f.a.Windows < 0 || f.a.Windows > 1000:
		return fail("--windows is %d; it must be from 0 to 1000", f.a.Windows)
	case f.a.PrefillMSPerToken < 0 || f.a.FetchMSPerBlock < 0 || f.a.DecodeMSPerToken < 0:
		return fail("the per-token and per-block times must be 0 or more")
	}
	if f.cacheTokens > 0 {
		ebs := f.a.EngineBlockSize
		if ebs == 0 {
			ebs = f.a.BlockSize
		}
		if f.cacheTokens < ebs {
			return fail("--cache-tokens is %d, less than one block of %d tokens: no worker could cache anything", f.cacheTokens, ebs)
		}
		f.a.Topology.Default.CacheBlocks = f.cacheTokens / ebs
	}
	switch f.choices {
	case "model":
	case "recorded":
		f.a.RecordedChoices = true
	default:
		return fail("--choices is %q; it must be model or recorded", f.choices)
	}
	if v, err := preview.ParseEvictInUse(f.evictInUse); err != nil {
		return fail("--evict-in-use is %v", err)
	} else {
		f.a.EvictInUse = v
	}
	if f.base == "-" && f.head == "-" || (f.trace == "-" && (f.base == "-" || f.head == "-")) {
		return fail("only one of --trace, --base and --head can be standard input")
	}
	if f.topology != "" {
		data, err := os.ReadFile(f.topology)
		if err != nil {
			return fail("--topology: %v", err)
		}
		t, err := preview.ParseTopology(data, f.a.Topology.Default)
		if err != nil {
			return fail("%s: %v", f.topology, err)
		}
		f.a.Topology = t
	}
	cat, form, err := withCatalog(cat, f.catalogFile, f.budget, "", stdin, stderr)
	if err != nil {
		return PreviewError
	}
	base, err := previewConfig(cat, form, "--base", f.base, f, stdin, stderr)
	if err != nil {
		return PreviewError
	}
	head, err := previewConfig(cat, form, "--head", f.head, f, stdin, stderr)
	if err != nil {
		return PreviewError
	}
	var trace io.Reader = stdin
	if f.trace != "-" {
		file, err := os.Open(f.trace)
		if err != nil {
			return fail("--trace: %v", err)
		}
		defer file.Close()
		trace = file
	}
	rep, err := preview.Run(cat, base, head, trace, f.a)
	if err != nil {
		var te *preview.TraceError
		if errors.As(err, &te) {
			return fail("%s: %v", f.trace, err)
		}
		return fail("%v", err)
	}
	if f.trace != "-" {
		rep.Trace.Path = f.trace
	}
	if f.output == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteMarkdown(stdout)
	}
	if err != nil {
		return fail("writing the report: %v", err)
	}
	if f.plot != "" {
		var b strings.Builder
		if err := rep.WriteSVG(&b); err != nil {
			return fail("--plot: %v", err)
		}
		if err := os.WriteFile(f.plot, []byte(b.String()), 0o644); err != nil {
			return fail("--plot: %v", err)
		}
	}
	switch rep.Verdict.Word {
	case preview.VerdictCannotTell:
		for _, why := range rep.Verdict.Reasons {
			fmt.Fprintf(stderr, "kvhint preview: warning: cannot tell: %s\n", why)
		}
		return PreviewCannotTell
	case preview.VerdictNoDifference:
		return PreviewSame
	}
	return PreviewDiffers
}

// previewConfig loads one side the way compile -f does, and requires it
// to come to exactly one config with a policy file.
func previewConfig(cat *hints.Catalog, form hintsconfig.Form, flag, path string, f *previewFlags, stdin io.Reader, stderr io.Writer) (preview.Config, error) {
	configs, err := loadCompiled(cat, []string{path}, f.router, f.mode, filecheck.FileRead{Form: form}, "", stdin, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kvhint preview: %s %s does not compile (see above)\n", flag, path)
		return preview.Config{}, err
	}
	var found []preview.Config
	var names []string
	for _, c := range configs {
		name := path
		if c.Router != "" {
			name = path + " (router " + c.Router + ")"
			names = append(names, c.Router)
		}
		if c.Doc != nil {
			found = append(found, preview.Config{Name: name, Doc: c.Doc, Modes: c.Modes, Hash: c.Hash, Form: c.Form})
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0:
		fmt.Fprintf(stderr, "kvhint preview: %s %s has no config with an accepted role\n", flag, path)
	default:
		fmt.Fprintf(stderr, "kvhint preview: %s %s compiles to %d configs (routers %s); choose one with --router\n",
			flag, path, len(found), strings.Join(names, ", "))
	}
	return preview.Config{}, exitError{code: PreviewError}
}
