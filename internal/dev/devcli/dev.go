package devcli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

func newDevCommand() *cobra.Command {
	var (
		assets, namespace string
		rate              float64
		interval, runFor  time.Duration
		keep, socket      bool
		push              bool
		hintPath          string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole product locally: control plane, manager, sidecars, simulated workers",
		Long: `Run kv-hint-operator on this machine, with nothing but loopback:

  - kube-apiserver and etcd (built from Go modules on first use, about ten
    minutes on two cores; reused afterwards), with the CRDs installed;
  - kvhint manager;
  - one kvhint sidecar per router of config/samples (llama, chat, embed),
    each with a router Pod it reports its applied hash on;
  - simulated workers advertised by Pod annotations, one of them without
    router_hint;
  - a small router in front of each sample router's workers: it books
    every completion request through its sidecar (POST /v1/bookings),
    carries the hint the booking answered in-band, on the request, and
    forwards the request to the booked worker;
  - config/samples applied, and a small stream of completion requests
    through those routers.

Hints arrive in-band, at kv_transfer_params.kv_hint (--hint-path picks
kv_hints or the legacy kv_transfer_params.router_hint). The workers
advertise no hint endpoint, as no engine known today opens one; with
--push-hints they do, and the sidecars push every hint to them as well.

It prints each role's conditions, the compiled hash, the hash each router
pod applied and the hints each worker received, in-band and pushed, until
Ctrl-C (or --duration), then stops everything and removes its files. It
writes a kubeconfig, so kubectl get rr,hp works from another shell.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cli.ContextOrBackground(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if runFor > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, runFor)
				defer cancel()
			}
			path, err := dispatch.ParseInBandPath(hintPath)
			if err != nil {
				return fmt.Errorf("--hint-path: %w", err)
			}
			o := devenv.Options{Assets: assets, Namespace: namespace, BookingSocket: socket, HintPath: path, PushHints: push}
			return runDev(ctx, cmd, o, rate, interval, keep, runFor > 0)
		},
	}
	f := cmd.Flags()
	f.StringVar(&assets, "assets", "", "folder with kube-apiserver and etcd (default: $KUBEBUILDER_ASSETS, else built by hack/envtest-assets.sh)")
	f.StringVar(&namespace, "namespace", "default", "namespace of the samples and pods")
	f.Float64Var(&rate, "rate", 20, "completion requests per second sent through each router with workers")
	f.DurationVar(&interval, "interval", 5*time.Second, "how often to print the status")
	f.DurationVar(&runFor, "duration", 0, "stop after this long and exit 1 unless every role is Ready and hints reached exactly the workers that advertise router_hint (0: until Ctrl-C)")
	f.BoolVar(&keep, "keep", false, "keep the kubeconfig and logs folder on exit")
	f.BoolVar(&socket, "booking-socket", false, "run each sidecar's booking API on a Unix socket (--listen unix:///PATH) in the logs folder, and book over it, instead of on a loopback port")
	f.StringVar(&hintPath, "hint-path", dispatch.InBandKVHint.String(), "where the routers carry hints on the requests they forward: kv_transfer_params.kv_hint, kv_hints or kv_transfer_params.router_hint")
	f.BoolVar(&push, "push-hints", false, "also advertise each worker's hint endpoint, so that the sidecars push hints to it (opt-in per worker; no engine known today opens one)")
	return cmd
}

func runDev(ctx context.Context, cmd *cobra.Command, o devenv.Options, rate float64, interval time.Duration, keep, bounded bool) error {
	namespace := o.Namespace
	out := cmd.OutOrStdout()
	dir, err := os.MkdirTemp("", "kvhint-dev-")
	if err != nil {
		return err
	}
	defer func() {
		if keep {
			fmt.Fprintf(out, "kvhint-dev dev: kept %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	fmt.Fprintln(out, "kvhint-dev dev: finding kube-apiserver and etcd (the first run builds them: about fifteen minutes on two cores)")
	o.Assets, err = controlplane.FindAssets(o.Assets, os.Stderr)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	o.Bin, o.Dir, o.Progress = bin, dir, out
	env, err := devenv.Start(ctx, o)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "kvhint-dev dev: stopping sidecars, manager, workers and the control plane")
		env.Stop()
	}()
	n, err := env.ApplySamples(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kvhint-dev dev: applied %d objects of config/samples to namespace %s\n", n, namespace)
	fmt.Fprintf(out, "kvhint-dev dev: from another shell: export KUBECONFIG=%s; kubectl get rr,hp -n %s\n", env.CP.Kubeconfig, namespace)
	fmt.Fprintf(out, "kvhint-dev dev: logs in %s\n", dir)
	if err := env.WaitSidecarsReady(ctx, time.Minute); err != nil {
		return err
	}
	fmt.Fprintln(out, "kvhint-dev dev: every sidecar runs a compiled config; sending completion requests through the routers")
	traffic := env.DriveRequests(ctx, rate)

	var last *devenv.Status
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if !bounded {
				return nil
			}
			return devVerdict(out, last, o.PushHints)
		case <-tick.C:
		}
		st, err := env.Status(ctx)
		if ctx.Err() != nil {
			// The run ended while the status was read: the reads it cut
			// short (a worker reads as -1) are no verdict, so the last
			// whole status stands.
			continue
		}
		if err != nil {
			fmt.Fprintf(out, "kvhint-dev dev: reading status: %v\n", err)
			continue
		}
		last = st
		fmt.Fprintf(out, "\n=== %s\n", time.Now().Format(time.TimeOnly))
		st.Print(out)
		totals := traffic.Totals()
		routers := make([]string, 0, len(totals))
		for r := range totals {
			routers = append(routers, r)
		}
		sort.Strings(routers)
		for _, r := range routers {
			t := totals[r]
			fmt.Fprintf(out, "bookings via %s: %d answered, %d with a hint (%d actions), %d requests served, %d errors", r, t.Bookings, t.Hints, t.Actions, t.Requests, t.Errors)
			if t.LastError != "" {
				fmt.Fprintf(out, " (last: %s)", t.LastError)
			}
			fmt.Fprintln(out)
		}
	}
}

// devVerdict judges a bounded run: every role Ready, and hints carried
// in-band to exactly the workers that advertise router_hint, none of them
// refused; with push, pushed to exactly those too, and without, to none.
func devVerdict(out interface{ Write([]byte) (int, error) }, st *devenv.Status, push bool) error {
	if st == nil || !st.AllReady() {
		fmt.Fprintln(out, "kvhint-dev dev: FAIL: not every RouterRole became Ready")
		return cli.Exit(1)
	}
	fail := func(format string, args ...any) error {
		fmt.Fprintf(out, "kvhint-dev dev: FAIL: "+format+"\n", args...)
		return cli.Exit(1)
	}
	for _, w := range st.Workers {
		switch {
		case w.Rejected != 0:
			return fail("worker %s refused %d malformed hints (or could not be read)", w.ID, w.Rejected)
		case w.RouterHint && w.InBand == 0 && w.Router != "":
			return fail("worker %s advertises router_hint but received no hint on its requests", w.ID)
		case !w.RouterHint && w.InBand > 0:
			return fail("worker %s does not advertise router_hint but received %d hints on its requests", w.ID, w.InBand)
		case !w.HintEndpoint && w.Pushed > 0:
			return fail("worker %s advertises no hint endpoint but %d hints were pushed to it", w.ID, w.Pushed)
		case push && w.RouterHint && w.HintEndpoint && w.Pushed == 0:
			return fail("worker %s advertises router_hint and a hint endpoint but no hint was pushed to it", w.ID)
		case !w.RouterHint && w.Pushed > 0:
			return fail("worker %s does not advertise router_hint but %d hints were pushed to it", w.ID, w.Pushed)
		}
	}
	fmt.Fprintln(out, "kvhint-dev dev: OK: every RouterRole is Ready and hints reached, in-band, exactly the workers that advertise router_hint")
	return nil
}
