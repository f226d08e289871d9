package sidecar

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/delivery"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/filewatch"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// AddFlags registers on fs a flag for each setting of o that the command
// line gives as it is: config sources, workers, listeners, the policies'
// deadlines and isolation, the limits, delivery and shutdown. What the
// command reads into another form (--router, --listen-mode, the router
// mode, the recorder's flags) it registers itself.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	f := fs
	f.StringVar(&o.ConfigFile, "config-file", "", "hints YAML file to run")
	f.StringVar(&o.ConfigDir, "config-dir", "", "mounted compiled ConfigMap directory holding hints.yaml and roles.yaml")
	f.StringVar(&o.ConfigMap, "configmap", "", "ConfigMap to watch in --namespace")
	f.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMap and the worker pods (default $POD_NAMESPACE)")
	f.DurationVar(&o.Poll, "poll-interval", filewatch.DefaultPollInterval, "reread interval of --config-file, --config-dir and --workers-file, whatever file events say")
	f.StringVar(&o.WorkersFile, "workers-file", "", "YAML file of standalone workers: a list of workers (id, capabilities, hint_endpoint, worker_type, ...), under a workers key or bare")
	f.BoolVar(&o.WorkerPods, "worker-pods", false, "register worker pods of --namespace: those the RouterRoles' workerSelectors pick (default true with --router or --configmap)")
	f.BoolVar(&o.AllowAbsoluteHintEndpoints, "allow-absolute-hint-endpoints", false, "take absolute URLs from worker pods' hint-endpoint annotations (default: only \":PORT/PATH\" on the pod's own IP)")
	f.BoolVar(&o.AllowLoopbackHintEndpoints, "allow-loopback-hint-endpoints", false, "development only: take hint endpoints on loopback (127.0.0.0/8, ::1, localhost), for simulated workers on this machine; the sidecar's own listeners stay refused")
	f.BoolVar(&o.ListenInsecureAnyAddress, "listen-insecure-any-address", false, "let --listen take a TCP address other than loopback (0.0.0.0, ::, a pod IP): its routes are not authenticated, so anyone who reaches it can book and, standalone, register workers")
	f.StringVar(&o.PodName, "pod-name", os.Getenv("POD_NAME"), "the sidecar's own pod, to write the applied hash on (default $POD_NAME; empty disables)")
	f.StringVar(&o.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the sidecar's own namespace (default $POD_NAMESPACE)")
	f.StringVar(&o.Listen, "listen", DefaultListen, "booking API address: a loopback HOST:PORT, or unix:///PATH for a Unix socket in a volume the router's container shares")
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
	f.DurationVar(&o.DeliveryTimeout, "delivery-timeout", delivery.DefaultDeliveryTimeout, "timeout of one hint post, connection included")
	f.DurationVar(&o.HintTTL, "hint-ttl", delivery.DefaultHintTTL, "a hint queued longer is dropped unsent")
	f.DurationVar(&o.ShutdownWait, "shutdown-timeout", DefaultShutdownWait, "how long shutdown drains queued hints")
	f.BoolVar(&o.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on --pprof-listen")
	f.StringVar(&o.PprofListen, "pprof-listen", DefaultPprofListen, "address of pprof; must be on loopback")
	f.DurationVar(&o.ReadTimeout, "http-read-timeout", listen.DefaultReadTimeout, "longest read of one request, body included, on the booking and ops listeners (request heads on the ops listener: at most 2s)")
	f.DurationVar(&o.WriteTimeout, "http-write-timeout", listen.DefaultWriteTimeout, "longest write of one answer on the booking and ops listeners")
	f.DurationVar(&o.IdleTimeout, "http-idle-timeout", listen.DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request")
	f.IntVar(&o.MaxBookingConns, "max-booking-connections", listen.DefaultMaxBookingConns, "open connections the booking listener takes; one more is answered 503 and counted")
	f.IntVar(&o.MaxOpsConns, "max-ops-connections", listen.DefaultMaxOpsConns, "open connections the ops listener takes; one more is answered 503 and counted")
}

// defaultOpsListen is the pod IP's ops port when the downward API gives
// POD_IP, so that kubelet and Prometheus reach it, and loopback otherwise.
func defaultOpsListen() string {
	if ip := os.Getenv("POD_IP"); ip != "" {
		return OpsListenFor(ip)
	}
	return DefaultOpsListen
}
