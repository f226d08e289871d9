package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kv-hint-operator/internal/memlimit"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/record"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func newSidecarCommand(cat *hints.Catalog) *cobra.Command {
	o := sidecar.Options{Catalog: cat}
	var rec record.Options
	var (
		routerName, selector, kubeconfig string
		listenMode                       string
		verbosity                        int
		memoryFraction                   float64
	)
	cmd := &cobra.Command{
		Use:   "sidecar (--config-file FILE | --config-dir DIR | --configmap NAME | --router NAME)",
		Short: "Run the router sidecar: turn every booking into at most one hint for the booked worker",
		Long: `Run the router sidecar. It loads a compiled hints config, reloads it on every
change (keeping the last good one when a change is invalid), and serves the
booking API on loopback, or on a Unix socket with --listen unix:///PATH:
POST /v1/bookings with the booking, answered with
the hint it built (200) or nothing (204). The answer is the message the
router carries in-band on the request it forwards to the booked worker
(dispatch.CarryHint: kv_transfer_params.kv_hint, kv_hints or the legacy
kv_transfer_params.router_hint). Only to a worker that advertises a hint
endpoint (opt-in; no engine known today opens one) is the hint also
posted, off the booking path.

Config sources (exactly one):
  --config-file FILE   a policy file (standalone), every role under
                       --router-mode (default kv), as Dynamo's router takes it
  --config-dir DIR     a mounted compiled ConfigMap directory; reads
                       DIR/hints.yaml and DIR/roles.yaml together and
                       survives kubelet's ..data symlink swaps
  --configmap NAME     watch ConfigMap NAME in --namespace through the API
  --router NAME        the same as --configmap NAME-hints

Workers: --workers-file and PUT /v1/workers/{id} (standalone), or worker
pods (Kubernetes, on by default with --router or --configmap): the pods each
RouterRole's workerSelector picks, from the ConfigMap's roles.yaml,
make that role's worker pool, and a role's hints go only to its pool (a role
without a selector takes any registered worker). Capabilities, hint endpoint,
worker type and source endpoints come from the pod annotations
hints.kvrouter.io/capabilities, hint-endpoint, worker-type and
source-control-endpoints; the hint endpoint is ":PORT/PATH" on the pod's own
IP, absolute URLs only with --allow-absolute-hint-endpoints. PUT and DELETE
/v1/workers/{id} answer only in standalone mode (403 with worker pods), and
never replace or remove a worker of the workers file or of a pod.

Hint endpoints never reach the router pod itself or the cloud around it:
loopback in any spelling, the pod's own addresses and the sidecar's
listeners, link-local and cloud metadata addresses (also inside NAT64 or
IPv4-mapped IPv6), unspecified, multicast and non-canonical numeric hosts
are refused when a worker registers and again when its name is resolved
for a dial. --allow-loopback-hint-endpoints lets loopback through for
development with simulated workers on the same machine.

No route of the booking listener is authenticated: --listen must be
loopback or a Unix socket; any other TCP address needs
--listen-insecure-any-address, which says the risk.

Bookings over --max-booking-bytes are refused with 413; the payload limit
follows it, so a committed copy the API accepts is always sent whole.

In a pod, give POD_NAME and POD_NAMESPACE through the downward API: the
sidecar then writes hints.kvrouter.io/applied-hash on its own Pod after
every config it applies. Metrics, /healthz and /readyz are on
--metrics-listen: give POD_IP (status.podIP) too, and they listen on the
pod IP only, where probes and scrapers reach them; pprof is on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = newLogger(cmd.ErrOrStderr(), verbosity)
			if err := memlimit.Set(o.Log, memoryFraction); err != nil {
				return err
			}
			if cmd.Flags().Changed("router-mode") && o.ConfigFile == "" {
				return errors.New("--router-mode is for --config-file: a compiled ConfigMap carries each role's router mode in roles.yaml")
			}
			if routerName != "" {
				if o.ConfigMap != "" {
					return errors.New("give --router or --configmap, not both")
				}
				o.ConfigMap = wellknown.ConfigMapName(routerName)
			}
			if !cmd.Flags().Changed("worker-pods") && o.ConfigMap != "" {
				// In Kubernetes the roles' pools come with the ConfigMap.
				o.WorkerPods = true
			}
			if o.MaxBookingBytes < 1024 {
				return fmt.Errorf("--max-booking-bytes is %d; it must be at least 1024", o.MaxBookingBytes)
			}
			if err := o.PolicyIsolation.Check(); err != nil {
				return err
			}
			if err := rec.CheckFlags(cmd.Flags()); err != nil {
				return err
			}
			if rec.Path != "" {
				o.Record = &rec
			}
			if err := setListenMode(&o, listenMode, cmd.Flags().Changed("listen-mode")); err != nil {
				return err
			}
			if selector != "" {
				sel, err := labels.Parse(selector)
				if err != nil {
					return fmt.Errorf("--worker-selector: %w", err)
				}
				o.WorkerSelector = sel
			}
			if o.ConfigMap != "" || o.WorkerPods || o.PodName != "" {
				kc, err := kubeClient(kubeconfig)
				if err != nil {
					return err
				}
				o.Kube = kc
				if o.PodNamespace == "" {
					o.PodNamespace = o.Namespace
				}
			}
			s, err := sidecar.New(o)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(ContextOrBackground(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return s.Run(ctx)
		},
	}
	f := cmd.Flags()
	o.AddFlags(f)
	rec.AddFlags(f)
	f.Var(routerModeFlag{&o.RouterMode}, "router-mode", "the router's mode for every role of --config-file: "+hintsconfig.RouterModeList()+"; hints run only under kv (default kv)")
	f.StringVar(&routerName, "router", "", "router name: watch ConfigMap <router>-hints in --namespace")
	f.StringVar(&selector, "worker-selector", "", "deprecated, not needed: limit the worker pod watch to this label selector; the RouterRoles' workerSelectors make the pools")
	_ = f.MarkDeprecated("worker-selector", "each RouterRole's spec.workerSelector, compiled into the ConfigMap, makes its role's worker pool")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG and ~/.kube/config)")
	f.StringVar(&listenMode, "listen-mode", fmt.Sprintf("%#o", listen.DefaultListenMode), "file mode (octal) of the --listen unix:///PATH socket: connecting needs write permission, so it says which users and groups may book")
	f.Float64Var(&memoryFraction, "memory-limit-fraction", memlimit.DefaultFraction, "GOMEMLIMIT as a fraction of the container's memory limit given in $"+memlimit.Env+" (downward API limits.memory); an explicit GOMEMLIMIT wins")
	f.IntVarP(&verbosity, "verbosity", "v", 0, "log verbosity (0 info, 1 debug)")
	return cmd
}

// setListenMode sets the booking socket's mode from --listen-mode, octal.
// The flag is refused with a TCP --listen, where it would do nothing.
func setListenMode(o *sidecar.Options, mode string, changed bool) error {
	_, isUnix, err := listen.SocketPath(o.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if changed && !isUnix {
		return fmt.Errorf("--listen-mode sets the mode of a Unix socket; --listen %q is TCP", o.Listen)
	}
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil || m == 0 || m > 0o777 {
		return fmt.Errorf("--listen-mode %q: want an octal mode from 0001 to 0777, such as 0660", mode)
	}
	o.ListenMode = fs.FileMode(m)
	return nil
}

// newLogger logs JSON lines through log/slog; logr's V(n) is slog level -n.
func newLogger(w io.Writer, verbosity int) logr.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.Level(-verbosity)})
	return logr.FromSlogHandler(h)
}

// kubeClient builds a client from --kubeconfig, else in-cluster, else the
// usual kubeconfig loading rules.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kvhint-sidecar"
	return kubernetes.NewForConfig(cfg)
}

// ContextOrBackground is cobra's context, which is nil outside Execute.
func ContextOrBackground(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
