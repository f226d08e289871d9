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

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/delivery"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/filewatch"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/record"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
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
			if err := setMemoryLimit(o.Log, memoryFraction); err != nil {
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
			if err := checkRecordFlags(cmd, &rec); err != nil {
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
	f.StringVar(&rec.Path, "record-trace", "", "record sampled bookings to this trace file for kvhint preview (hashes and ids remapped per recording; off when empty)")
	f.Float64Var(&rec.SampleRate, "record-sample-rate", 0.01, "share of requests recorded, in (0, 1]; all roles of a request together")
	f.Int64Var(&rec.MaxBytes, "record-max-bytes", record.DefaultMaxBytes, "rotate the trace file at this size")
	f.IntVar(&rec.MaxFiles, "record-max-files", record.DefaultMaxFiles, fmt.Sprintf("rotated trace files kept (PATH.1 ...), from 1 to %d; a file an earlier run left at PATH is rotated aside at start", record.MaxMaxFiles))
	f.Int64Var(&rec.MaxQueueBytes, "record-max-queued-bytes", record.DefaultMaxQueueBytes, "memory of the sampled bookings waiting for the trace writer (part of the sidecar's memory budget); a booking past it is dropped and counted")
	f.DurationVar(&rec.FlushInterval, "record-flush-interval", record.DefaultFlushInterval, "longest a recorded row waits in memory before it is written (what a kill may lose)")
	f.StringVar(&o.ConfigFile, "config-file", "", "hints YAML file to run")
	f.StringVar(&o.ConfigDir, "config-dir", "", "mounted compiled ConfigMap directory holding hints.yaml and roles.yaml")
	f.Var(routerModeFlag{&o.RouterMode}, "router-mode", "the router's mode for every role of --config-file: "+hintsconfig.RouterModeList()+"; hints run only under kv (default kv)")
	f.StringVar(&o.ConfigMap, "configmap", "", "ConfigMap to watch in --namespace")
	f.StringVar(&routerName, "router", "", "router name: watch ConfigMap <router>-hints in --namespace")
	f.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMap and the worker pods (default $POD_NAMESPACE)")
	f.DurationVar(&o.Poll, "poll-interval", filewatch.DefaultPollInterval, "reread interval of --config-file, --config-dir and --workers-file, whatever file events say")
	f.StringVar(&o.WorkersFile, "workers-file", "", "YAML file of standalone workers: a list of workers (id, capabilities, hint_endpoint, worker_type, ...), under a workers key or bare")
	f.BoolVar(&o.WorkerPods, "worker-pods", false, "register worker pods of --namespace: those the RouterRoles' workerSelectors pick (default true with --router or --configmap)")
	f.StringVar(&selector, "worker-selector", "", "deprecated, not needed: limit the worker pod watch to this label selector; the RouterRoles' workerSelectors make the pools")
	_ = f.MarkDeprecated("worker-selector", "each RouterRole's spec.workerSelector, compiled into the ConfigMap, makes its role's worker pool")
	f.BoolVar(&o.AllowAbsoluteHintEndpoints, "allow-absolute-hint-endpoints", false, "take absolute URLs from worker pods' hint-endpoint annotations (default: only \":PORT/PATH\" on the pod's own IP)")
	f.BoolVar(&o.AllowLoopbackHintEndpoints, "allow-loopback-hint-endpoints", false, "development only: take hint endpoints on loopback (127.0.0.0/8, ::1, localhost), for simulated workers on this machine; the sidecar's own listeners stay refused")
	f.BoolVar(&o.ListenInsecureAnyAddress, "listen-insecure-any-address", false, "let --listen take a TCP address other than loopback (0.0.0.0, ::, a pod IP): its routes are not authenticated, so anyone who reaches it can book and, standalone, register workers")
	f.StringVar(&o.PodName, "pod-name", os.Getenv("POD_NAME"), "the sidecar's own pod, to write the applied hash on (default $POD_NAME; empty disables)")
	f.StringVar(&o.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the sidecar's own namespace (default $POD_NAMESPACE)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG and ~/.kube/config)")
	f.StringVar(&o.Listen, "listen", sidecar.DefaultListen, "booking API address: a loopback HOST:PORT, or unix:///PATH for a Unix socket in a volume the router's container shares")
	f.StringVar(&listenMode, "listen-mode", fmt.Sprintf("%#o", listen.DefaultListenMode), "file mode (octal) of the --listen unix:///PATH socket: connecting needs write permission, so it says which users and groups may book")
	f.StringVar(&o.OpsListen, "metrics-listen", defaultOpsListen(), "address of /metrics, /healthz and /readyz (default $POD_IP:8791 where POD_IP is set, for kubelet probes and scrapers; else loopback)")
	f.DurationVar(&o.PolicyDeadline, "policy-deadline", dispatch.DefaultPolicyDeadline, "how long one hint policy may run on a booking before the run counts as an overrun (its actions are kept)")
	f.DurationVar(&o.PolicyIsolation.HardDeadline, "policy-hard-deadline", dispatch.DefaultPolicyHardDeadline, "the most a booking waits for a policy that may block (not a built-in); the booking answers without it past that, and the policy is ejected")
	f.IntVar(&o.PolicyIsolation.EjectAfter, "policy-eject-after", dispatch.DefaultEjectAfter, "overruns in a row that eject a policy that may block from its role's path")
	f.DurationVar(&o.PolicyIsolation.EjectionBase, "policy-ejection-base", dispatch.DefaultEjectionBase, "how long a first ejection lasts; the policy then runs on probation")
	f.Float64Var(&o.PolicyIsolation.EjectionMultiplier, "policy-ejection-multiplier", dispatch.DefaultEjectionMultiplier, "multiplies the ejection time for each ejection in a row (at least 1)")
	f.DurationVar(&o.PolicyIsolation.EjectionMax, "policy-ejection-max", dispatch.DefaultEjectionMax, "the longest ejection")
	f.IntVar(&o.PolicyIsolation.ProbationRuns, "policy-probation-runs", dispatch.DefaultProbationRuns, "runs in a row on time that end a probation (one overrun on probation ejects again, for longer)")
	f.IntVar(&o.PolicyIsolation.MaxRuns, "policy-max-runs", dispatch.DefaultMaxPolicyRuns, "runs of one policy that may block in flight at once, those abandoned at the hard deadline included; past it bookings skip the policy")
	f.DurationVar(&o.PolicyDeadlinePerBlock, "policy-deadline-per-block", dispatch.DefaultPolicyDeadlinePerBlock, "added to the deadline of a policy that reads the committed copy (kv-fetch), per block of the copy")
	f.IntVar(&o.MaxBookingBytes, "max-booking-bytes", dispatch.DefaultMaxBookingBytes, "largest booking body accepted (413 above); the payload limit follows it (1 MiB holds about 49,000 block hashes)")
	f.IntVar(&o.QueueSize, "queue-size", delivery.DefaultQueueSize, "hints queued per worker; when full the newest is dropped")
	f.Int64Var(&o.MaxQueuedBytes, "max-queued-hint-bytes", delivery.DefaultMaxQueuedBytes, "bytes of hints queued across all workers; a hint past it is dropped and counted (memory_budget)")
	f.IntVar(&o.MaxWorkerConns, "max-worker-connections", delivery.DefaultMaxWorkerConns, "connections open to all workers together; lowered to what the descriptor limit leaves after the listeners' caps; a post that finds none is counted (connection_limit)")
	f.IntVar(&o.MaxWorkersPerSource, "max-workers-per-source", workers.DefaultMaxWorkersPerSource, "workers each source (api, file, pods) may register; the rest are refused and counted (workers_over_limit_total)")
	f.Int64Var(&o.MaxBookingMemory, "max-booking-memory", booking.DefaultMaxBookingMemory, "memory the bookings in flight may hold, charged 6 bytes per body byte of a booking over 16 KiB before it is read; one past it is answered 503 with Retry-After and counted")
	f.Float64Var(&memoryFraction, "memory-limit-fraction", DefaultMemoryLimitFraction, "GOMEMLIMIT as a fraction of the container's memory limit given in $"+MemoryLimitEnv+" (downward API limits.memory); an explicit GOMEMLIMIT wins")
	f.DurationVar(&o.DeliveryTimeout, "delivery-timeout", delivery.DefaultDeliveryTimeout, "timeout of one hint post, connection included")
	f.DurationVar(&o.HintTTL, "hint-ttl", delivery.DefaultHintTTL, "a hint queued longer is dropped unsent")
	f.DurationVar(&o.ShutdownWait, "shutdown-timeout", sidecar.DefaultShutdownWait, "how long shutdown drains queued hints")
	f.BoolVar(&o.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on --pprof-listen")
	f.StringVar(&o.PprofListen, "pprof-listen", sidecar.DefaultPprofListen, "address of pprof; must be on loopback")
	f.DurationVar(&o.ReadTimeout, "http-read-timeout", listen.DefaultReadTimeout, "longest read of one request, body included, on the booking and ops listeners (request heads on the ops listener: at most 2s)")
	f.DurationVar(&o.WriteTimeout, "http-write-timeout", listen.DefaultWriteTimeout, "longest write of one answer on the booking and ops listeners")
	f.DurationVar(&o.IdleTimeout, "http-idle-timeout", listen.DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request")
	f.IntVar(&o.MaxBookingConns, "max-booking-connections", listen.DefaultMaxBookingConns, "open connections the booking listener takes; one more is answered 503 and counted")
	f.IntVar(&o.MaxOpsConns, "max-ops-connections", listen.DefaultMaxOpsConns, "open connections the ops listener takes; one more is answered 503 and counted")
	f.IntVarP(&verbosity, "verbosity", "v", 0, "log verbosity (0 info, 1 debug)")
	return cmd
}

// recordFlags are the flags that need --record-trace.
var recordFlags = []string{"record-sample-rate", "record-max-bytes", "record-max-files", "record-max-queued-bytes", "record-flush-interval"}

// checkRecordFlags refuses recorder flags out of range, naming the flag,
// and recorder flags without --record-trace.
func checkRecordFlags(cmd *cobra.Command, rec *record.Options) error {
	if rec.Path == "" {
		for _, name := range recordFlags {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s needs --record-trace PATH", name)
			}
		}
		return nil
	}
	switch {
	case !(rec.SampleRate > 0 && rec.SampleRate <= 1):
		return fmt.Errorf("--record-sample-rate is %g; it must be above 0 and at most 1", rec.SampleRate)
	case rec.MaxBytes <= 0:
		return fmt.Errorf("--record-max-bytes is %d; it must be above 0", rec.MaxBytes)
	case rec.MaxFiles < 1 || rec.MaxFiles > record.MaxMaxFiles:
		return fmt.Errorf("--record-max-files is %d; it must be from 1 to %d", rec.MaxFiles, record.MaxMaxFiles)
	case rec.MaxQueueBytes <= 0:
		return fmt.Errorf("--record-max-queued-bytes is %d; it must be above 0", rec.MaxQueueBytes)
	case rec.FlushInterval <= 0:
		return fmt.Errorf("--record-flush-interval is %v; it must be above 0", rec.FlushInterval)
	}
	return nil
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

// defaultOpsListen is the pod IP's ops port when the downward API gives
// POD_IP, so that kubelet and Prometheus reach it, and loopback otherwise.
func defaultOpsListen() string {
	if ip := os.Getenv("POD_IP"); ip != "" {
		return sidecar.OpsListenFor(ip)
	}
	return sidecar.DefaultOpsListen
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
