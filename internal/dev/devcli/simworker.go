package devcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
)

func newSimWorkerCommand() *cobra.Command {
	var (
		listens, ids         []string
		workerType, register string
		printEndpoint, sink  bool
		cache                simworker.Options
	)
	cmd := &cobra.Command{
		Use:   "sim-worker --id ID [--listen ADDR] [--register SIDECAR_URL]",
		Short: "Run a simulated worker that records the hints it receives, in-band and pushed",
		Long: `Run a simulated inference worker. It serves engine-style completion
requests (POST /v1/completions and /v1/chat/completions) and takes the hint
a router carries on them in-band, at kv_transfer_params.kv_hint, a
top-level kv_hints or the legacy kv_transfer_params.router_hint, as engines
read it. It also takes hints pushed to POST /v1/hints, for a sidecar told
to push to it. It checks every hint against the wire format an engine
accepts (a malformed one is refused with 400 and counted) and records the
good ones, in-band and pushed apart: GET /hints lists them, DELETE /hints
forgets them.

It keeps a simulated prefix cache: an LRU of --cache-blocks KV blocks,
each --block-size tokens of the prompt's text (four bytes a token), the
hash of a block chained on those before it. A completion is served from
the longest prefix of its blocks the cache holds, answered in its
usage.prompt_tokens_details.cached_tokens, and leaves its blocks cached; a
kv.fetch in a hint brings the fetched copy's blocks in. The answer waits a
simulated time to first token, --ttft-per-token for each prompt token not
cached, at most --ttft-max.

With --sink it is a throughput sink for load runs: it reads and counts every
hint (GET /hints reports the count as "accepted") but neither checks nor
records them, and it is served by fasthttp instead of net/http, so that it
competes as little as it can with the sidecar for the CPU. Without
it, every hint is checked and recorded.

A sink may be several workers in one process: give --id and --listen once
per worker, in pairs (--id p0 --listen 127.0.0.1:9601 --id p1 --listen
127.0.0.1:9602). A load run that puts its workers on one core then runs one
Go scheduler there instead of one per worker, each woken on its own for
every hint.

With --register it registers itself with a standalone sidecar
(PUT SIDECAR_URL/v1/workers/ID), which takes a worker on loopback only
when it runs with --allow-loopback-hint-endpoints (development). It prints its hint endpoint on standard
output once it listens: the whole line with --print-endpoint, for scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(ids) == 0 {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("--id is required: %w", err)
				}
				ids = []string{h}
			}
			if len(listens) == 0 {
				listens = []string{"127.0.0.1:0"}
			}
			if len(ids) > 1 || len(listens) > 1 {
				switch {
				case !sink:
					return errors.New("several --id or --listen: only a --sink runs several workers in one process")
				case len(ids) != len(listens):
					return fmt.Errorf("%d --id but %d --listen: give them in pairs, one of each per worker", len(ids), len(listens))
				case register != "" || printEndpoint:
					return errors.New("--register and --print-endpoint take one worker")
				}
			}
			var srvs []*simworker.Server
			defer func() {
				for _, s := range srvs {
					s.Close()
				}
			}()
			for i, id := range ids {
				srv, err := simworker.Start(simworker.New(simworker.Options{ID: id, WorkerType: workerType, Sink: sink,
					CacheBlocks: cache.CacheBlocks, BlockSize: cache.BlockSize, TTFTPerToken: cache.TTFTPerToken, TTFTMax: cache.TTFTMax}), listens[i])
				if err != nil {
					return fmt.Errorf("worker %s: %w", id, err)
				}
				srvs = append(srvs, srv)
			}
			ctx, stop := signal.NotifyContext(cli.ContextOrBackground(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if register != "" {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := simworker.Register(rctx, register, ids[0], srvs[0].HintEndpoint(), workerType)
				cancel()
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			for i, srv := range srvs {
				switch {
				case printEndpoint:
					fmt.Fprintln(out, srv.HintEndpoint())
				case sink:
					fmt.Fprintf(out, "sim-worker %s listening as a sink (hints counted, not checked or recorded): hint endpoint %s, counts at %s/hints\n", ids[i], srv.HintEndpoint(), srv.URL)
				default:
					fmt.Fprintf(out, "sim-worker %s listening: hint endpoint %s, received hints at %s/hints\n", ids[i], srv.HintEndpoint(), srv.URL)
				}
			}
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var errs []error
			for _, srv := range srvs {
				errs = append(errs, srv.Shutdown(sctx))
			}
			return errors.Join(errs...)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cache.CacheBlocks, "cache-blocks", simworker.DefaultCacheBlocks, "capacity of the simulated prefix cache, in KV blocks (negative: no cache)")
	f.IntVar(&cache.BlockSize, "block-size", simworker.DefaultBlockSize, "tokens per KV block of the simulated prefix cache")
	f.DurationVar(&cache.TTFTPerToken, "ttft-per-token", simworker.DefaultTTFTPerToken, "simulated time to first token per prompt token not served from the cache (negative: none)")
	f.DurationVar(&cache.TTFTMax, "ttft-max", simworker.DefaultTTFTMax, "the most a completion waits for its simulated first token")
	f.StringArrayVar(&listens, "listen", nil, "address to listen on (port 0 picks a free port; default 127.0.0.1:0); once per --id with --sink")
	f.StringArrayVar(&ids, "id", nil, "worker ID routers book (default: the host name); repeat with --sink for several workers in one process")
	f.StringVar(&workerType, "worker-type", "decode", "router_hint_worker_type: aggregated, prefill or decode")
	f.StringVar(&register, "register", "", "register with the standalone sidecar at this base URL, e.g. http://127.0.0.1:8790")
	f.BoolVar(&printEndpoint, "print-endpoint", false, "print only the hint endpoint URL once listening")
	f.BoolVar(&sink, "sink", false, "count hints without checking or recording them (for throughput runs)")
	return cmd
}
