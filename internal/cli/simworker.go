package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/simworker"
)

func newSimWorkerCommand() *cobra.Command {
	var (
		listen, id, workerType, register string
		printEndpoint, sink              bool
	)
	cmd := &cobra.Command{
		Use:   "sim-worker --id ID [--listen ADDR] [--register SIDECAR_URL]",
		Short: "Run a simulated worker that advertises router_hint and records the hints it receives",
		Long: `Run a simulated inference worker. It takes hints on POST /v1/hints, checks
each against the wire format an engine accepts (a malformed one is refused
with 400 and counted), and records the good ones: GET /hints lists them,
DELETE /hints forgets them.

With --sink it is a throughput sink for load runs: it reads and counts every
hint (GET /hints reports the count as "accepted") but neither checks nor
records them, and it is served by fasthttp instead of net/http, so that it
competes as little as it can with the sidecar for the CPU. Without
it, every hint is checked and recorded.

With --register it registers itself with a standalone sidecar
(PUT SIDECAR_URL/v1/workers/ID). It prints its hint endpoint on standard
output once it listens: the whole line with --print-endpoint, for scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("--id is required: %w", err)
				}
				id = h
			}
			srv, err := simworker.Start(simworker.New(simworker.Options{ID: id, WorkerType: workerType, Sink: sink}), listen)
			if err != nil {
				return err
			}
			defer srv.Close()
			ctx, stop := signal.NotifyContext(contextOrBackground(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if register != "" {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := simworker.Register(rctx, register, id, srv.HintEndpoint(), workerType)
				cancel()
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			switch {
			case printEndpoint:
				fmt.Fprintln(out, srv.HintEndpoint())
			case sink:
				fmt.Fprintf(out, "sim-worker %s listening as a sink (hints counted, not checked or recorded): hint endpoint %s, counts at %s/hints\n", id, srv.HintEndpoint(), srv.URL)
			default:
				fmt.Fprintf(out, "sim-worker %s listening: hint endpoint %s, received hints at %s/hints\n", id, srv.HintEndpoint(), srv.URL)
			}
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on (port 0 picks a free port)")
	f.StringVar(&id, "id", "", "worker ID routers book (default: the host name)")
	f.StringVar(&workerType, "worker-type", "decode", "router_hint_worker_type: aggregated, prefill or decode")
	f.StringVar(&register, "register", "", "register with the standalone sidecar at this base URL, e.g. http://127.0.0.1:8790")
	f.BoolVar(&printEndpoint, "print-endpoint", false, "print only the hint endpoint URL once listening")
	f.BoolVar(&sink, "sink", false, "count hints without checking or recording them (for throughput runs)")
	return cmd
}
