// Package sidecar assembles the router sidecar (`kvhint sidecar`): the
// process in each router pod that runs the public dispatch core
// (pkg/dispatch) for routers that book over HTTP. It holds the options, New
// (which wires the rooms together), Start, Shutdown and Run, and nothing
// else; each part is a room of its own:
//
//   - booking: POST /v1/bookings on fasthttp, and the body decoder;
//   - admin: the worker and config routes, on net/http's ServeMux;
//   - workers: the worker registry and its sources (pods, a file);
//   - delivery: queues, byte budget, poster and connections;
//   - endpoint: the hint endpoint checks;
//   - configsource: the policy file, mounted directory and ConfigMap;
//   - stage: a staged rollout's candidate beside the stable config
//     (shadow, canary);
//   - podreport: the applied hash and config status on the sidecar's own
//     Pod;
//   - outcomes: the request outcomes routers report, by config hash, for
//     a staged rollout's analysis (POST /v1/outcomes on the booking
//     listener, GET /v1/rollout/outcomes on the ops listener);
//   - ops: the metrics registry, health, readiness and pprof;
//   - listen, filewatch, jsonbody: listeners and their caps, file
//     watching, strict JSON bodies.
//
// A booking's path: booking.API.Book decodes the body, stage.Stage.Book
// picks the config (the stable one unless a rollout stages a candidate),
// Dispatcher.Book runs the policies and calls workers.Worker.Deliver,
// which queues the message for the worker's sender (delivery).
//
// It may import every room; no room imports it.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/admin"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/configsource"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/delivery"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/endpoint"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/ops"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/outcomes"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/podreport"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/record"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/stage"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"

	"github.com/go-logr/logr"
	"github.com/valyala/fasthttp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// Listener defaults. The booking API is on loopback, or on a Unix socket
// (unix:///PATH) in a volume the pod's containers share: only the router
// in the same pod should book. The ops listener (metrics, probes) is on
// loopback too unless given the pod IP (OpsListenFor), which is where
// kubelet probes and scrapers reach it; never every interface by default.
// pprof is on loopback only.
const (
	DefaultListen       = "127.0.0.1:8790"
	DefaultOpsListen    = "127.0.0.1:" + defaultOpsPort
	DefaultPprofListen  = "127.0.0.1:8792"
	DefaultShutdownWait = 5 * time.Second

	defaultOpsPort = "8791"
)

// OpsListenFor is the ops address on a pod's IP: where kubelet's probes
// and Prometheus reach it, and nowhere else.
func OpsListenFor(podIP string) string { return net.JoinHostPort(podIP, defaultOpsPort) }

// Options configure a Sidecar. Exactly one config source is set: ConfigFile,
// ConfigDir or ConfigMap.
type Options struct {
	Catalog *hints.Catalog

	// ConfigFile is a policy file (standalone use), every role of it run
	// under RouterMode.
	ConfigFile string
	// RouterMode is the router's --router-mode for ConfigFile; empty
	// means kv. A compiled ConfigMap carries each role's mode itself.
	RouterMode hintsconfig.RouterMode
	// ConfigDir is a mounted compiled ConfigMap directory: its hints.yaml
	// and roles.yaml.
	ConfigDir string
	// ConfigMap is the name of a ConfigMap to watch in Namespace.
	ConfigMap string
	// Namespace of the ConfigMap and of the worker pods.
	Namespace string
	// Poll is the fallback reread interval of a file or directory.
	Poll time.Duration

	// WorkersFile lists standalone workers.
	WorkersFile string
	// WorkerPods registers worker pods of Namespace: those the roles'
	// worker selectors pick (from the ConfigMap), or every pod while a
	// role has none.
	WorkerPods bool
	// WorkerSelector, when set, limits the pod watch to the pods it picks
	// (the deprecated --worker-selector); the roles' pools still apply.
	WorkerSelector labels.Selector
	// AllowAbsoluteHintEndpoints takes absolute URLs from worker pods'
	// hint-endpoint annotations. Off, a pod gives only a port and a path
	// on its own IP.
	AllowAbsoluteHintEndpoints bool
	// AllowLoopbackHintEndpoints takes hint endpoints on loopback, for
	// development, where the simulated workers run on the same machine
	// (--allow-loopback-hint-endpoints). Off, as in every real
	// deployment, an endpoint that reaches the router pod itself is
	// refused at registration and at dial (endpoint.Policy); the
	// sidecar's own listeners are refused either way.
	AllowLoopbackHintEndpoints bool
	// ListenInsecureAnyAddress lets Listen be a TCP address other than
	// loopback (--listen-insecure-any-address): the booking listener has
	// no authentication, so only the pod should reach it.
	ListenInsecureAnyAddress bool

	// PodName and PodNamespace identify the sidecar's own pod, to write
	// the applied hash on; empty disables it.
	PodName, PodNamespace string
	// Kube is the API client, needed by ConfigMap, WorkerPods and PodName.
	Kube kubernetes.Interface

	// Listen is the booking API address: host:port on TCP, or
	// unix:///PATH for a Unix socket (see SocketPath). OpsListen serves
	// metrics and health. Port 0 picks a free port (see Sidecar.BookingAddr).
	Listen, OpsListen string
	// ListenMode is the file mode of a Listen socket; 0 means
	// DefaultListenMode. Connecting needs write permission, so it says who
	// may book. Unused on TCP.
	ListenMode fs.FileMode

	PolicyDeadline time.Duration
	// PolicyDeadlinePerBlock is the deadline a policy that reads the
	// committed copy gets per block of it (dispatch.Options).
	PolicyDeadlinePerBlock time.Duration
	// PolicyIsolation bounds the policies that may block and says when
	// one is ejected (dispatch.Options.Isolation).
	PolicyIsolation dispatch.IsolationOptions
	// MaxBookingBytes caps a booking request body and the copy the
	// dispatcher accepts (dispatch.Options.MaxBookingBytes); 0 means
	// dispatch.DefaultMaxBookingBytes.
	MaxBookingBytes int
	// Record, when set, records sampled bookings as a trace for kvhint
	// preview (package record); nil records nothing.
	Record          *record.Options
	QueueSize       int
	DeliveryTimeout time.Duration
	HintTTL         time.Duration
	// MaxQueuedBytes bounds the bytes of hints queued across all workers.
	MaxQueuedBytes int64
	// MaxWorkerConns bounds the connections open to all workers; 0 means
	// delivery.DefaultMaxWorkerConns, and the descriptor limit lowers it
	// (delivery.ConnLimit).
	MaxWorkerConns int
	// MaxWorkersPerSource caps the workers each source registers; 0 means
	// workers.DefaultMaxWorkersPerSource.
	MaxWorkersPerSource int
	// MaxBookingMemory bounds the memory of the bookings in flight; 0
	// means booking.DefaultMaxBookingMemory.
	MaxBookingMemory int64
	// ShutdownWait bounds the drain of queued hints on shutdown.
	ShutdownWait time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/ on PprofListen.
	Pprof bool
	// PprofListen is the pprof address; it must be on loopback.
	PprofListen string

	// ReadTimeout bounds reading one request, body included; WriteTimeout
	// writing its answer; IdleTimeout a keep-alive connection between
	// requests. MaxBookingConns and MaxOpsConns cap the open connections
	// of each listener: one more is answered 503 and closed, and counted.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxBookingConns, MaxOpsConns           int

	Log logr.Logger
}

func (o *Options) check() error {
	n := 0
	for _, s := range []string{o.ConfigFile, o.ConfigDir, o.ConfigMap} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("give exactly one config source: a file, a directory or a ConfigMap")
	}
	if o.Catalog == nil {
		return errors.New("no catalog")
	}
	needKube := o.ConfigMap != "" || o.WorkerPods || o.PodName != ""
	if needKube && o.Kube == nil {
		return errors.New("a ConfigMap source, worker pods and the applied-hash report need a Kubernetes client")
	}
	if (o.ConfigMap != "" || o.WorkerPods) && o.Namespace == "" {
		return errors.New("a ConfigMap source and worker pods need a namespace")
	}
	if o.PodName != "" && o.PodNamespace == "" {
		return errors.New("the pod name needs the pod namespace")
	}
	if _, _, err := listen.SocketPath(o.Listen); err != nil {
		return err
	}
	if o.Listen != "" && !o.ListenInsecureAnyAddress {
		if err := listen.CheckLoopback(o.Listen); err != nil {
			return err
		}
	}
	if o.ListenMode&^fs.ModePerm != 0 {
		return fmt.Errorf("listen mode %#o has bits other than permissions (at most 0777)", o.ListenMode)
	}
	if o.Pprof {
		addr := o.PprofListen
		if addr == "" {
			addr = DefaultPprofListen
		}
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("pprof listen address %q must be a loopback IP and port: profiles show the process's memory", addr)
		}
	}
	return nil
}

// Sidecar is the whole router sidecar: dispatcher, config source, worker
// registry and sources, delivery, pod reporter and the two HTTP listeners.
type Sidecar struct {
	opts Options
	// Metrics is the sidecar's metrics registry; every room registers its
	// own metrics in it.
	Metrics    *prometheus.Registry
	Dispatcher *dispatch.Dispatcher
	Workers    *workers.Registry
	Delivery   *delivery.Delivery
	pods       *workers.PodWorkers
	file       *workers.FileSource
	endpoints  *endpoint.Policy
	reporter   *podreport.Reporter
	listeners  *listen.Metrics
	// bookingBudget bounds the memory of the bookings in flight.
	bookingBudget *booking.Budget
	// recorder records sampled bookings; nil unless Options.Record.
	recorder *record.Recorder
	// Stage books through the stable dispatcher and a staged rollout's
	// candidate; its Shadow method serves the shadow comparisons.
	Stage *stage.Stage
	// Outcomes holds the request outcomes the router reports.
	Outcomes *outcomes.Store

	bookingLn, opsLn, pprofLn net.Listener
	// booking serves the booking API on bookingConns (the booking
	// listener, capped); servers are the ops and pprof listeners'.
	booking      *fasthttp.Server
	bookingConns *listen.CapListener
	servers      []*http.Server
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// New assembles a sidecar; Start runs it.
func New(o Options) (*Sidecar, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.OpsListen == "" {
		o.OpsListen = DefaultOpsListen
	}
	if o.ListenMode == 0 {
		o.ListenMode = listen.DefaultListenMode
	}
	if o.ShutdownWait <= 0 {
		o.ShutdownWait = DefaultShutdownWait
	}
	if o.PprofListen == "" {
		o.PprofListen = DefaultPprofListen
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.ReadTimeout, listen.DefaultReadTimeout}, {&o.WriteTimeout, listen.DefaultWriteTimeout}, {&o.IdleTimeout, listen.DefaultIdleTimeout}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.MaxBookingConns <= 0 {
		o.MaxBookingConns = listen.DefaultMaxBookingConns
	}
	if o.MaxOpsConns <= 0 {
		o.MaxOpsConns = listen.DefaultMaxOpsConns
	}
	if o.MaxBookingMemory <= 0 {
		o.MaxBookingMemory = booking.DefaultMaxBookingMemory
	}
	m := ops.NewRegistry()
	// One policy for every hint endpoint: checked by the registry when a
	// worker registers, by delivery's dialer on the resolved address.
	eps := &endpoint.Policy{AllowLoopback: o.AllowLoopbackHintEndpoints}
	// Connections to workers get the descriptors the listeners' caps leave.
	o.MaxWorkerConns = delivery.ConnLimit(o.MaxWorkerConns, o.MaxBookingConns+o.MaxOpsConns+listen.MaxPprofConns)
	del := delivery.New(delivery.Options{QueueSize: o.QueueSize, Timeout: o.DeliveryTimeout, HintTTL: o.HintTTL, MaxQueuedBytes: o.MaxQueuedBytes,
		MaxConns: o.MaxWorkerConns, DialControl: eps.CheckDial, Metrics: delivery.NewMetrics(m), Log: o.Log.WithName("delivery")})
	reg := workers.NewRegistry(registryDelivery{del})
	reg.Endpoints = eps
	reg.SetMaxPerSource(o.MaxWorkersPerSource, o.Log.WithName("workers"))
	reg.RegisterMetrics(m)
	if o.MaxBookingBytes <= 0 {
		o.MaxBookingBytes = dispatch.DefaultMaxBookingBytes
	}
	dopts := dispatch.Options{Catalog: o.Catalog, Workers: reg, Metrics: dispatchmetrics.New(m), PolicyDeadline: o.PolicyDeadline,
		PolicyDeadlinePerBlock: o.PolicyDeadlinePerBlock, Isolation: o.PolicyIsolation, MaxBookingBytes: o.MaxBookingBytes, RouterMode: o.RouterMode, Log: o.Log.WithName("dispatcher")}
	d := dispatch.NewDispatcher(dopts)
	// A staged candidate books the workers of its own worker selectors
	// (applyCandidatePools), through the same registry.
	candOpts := dopts
	candOpts.Workers = reg.Candidate()
	s := &Sidecar{opts: o, Metrics: m, Dispatcher: d, Stage: stage.New(d, candOpts, m), Workers: reg, Delivery: del, endpoints: eps, listeners: listen.NewMetrics(m),
		bookingBudget: booking.NewBudget(o.MaxBookingMemory, m), Outcomes: outcomes.NewStore(outcomes.Options{Metrics: outcomes.NewMetrics(m)})}
	if o.WorkersFile != "" {
		s.file = &workers.FileSource{Path: o.WorkersFile, Poll: o.Poll}
	}
	if o.WorkerPods {
		s.pods = &workers.PodWorkers{Client: o.Kube, Namespace: o.Namespace, Selector: o.WorkerSelector, Registry: reg, AllowAbsoluteEndpoints: o.AllowAbsoluteHintEndpoints}
	}
	if o.PodName != "" {
		s.reporter = podreport.New(o.Kube, o.PodNamespace, o.PodName)
		d.OnApply(s.reporter.Report)
		d.OnEjectionChange(func() {
			ej := d.Ejections()
			list := make([]podreport.Ejected, len(ej))
			for i, e := range ej {
				list[i] = podreport.Ejected{Role: e.Role, Policy: e.Policy, Reason: e.Reason.String()}
			}
			s.reporter.ReportEjected(list)
		})
	}
	if o.Record != nil {
		ro := *o.Record
		ro.Registerer, ro.Log = m, o.Log.WithName("record")
		rec, err := record.New(ro)
		if err != nil {
			return nil, err
		}
		s.recorder = rec
	}
	return s, nil
}

// BookingAddr is the booking API's address, once started: host:port, or
// the socket's path.
func (s *Sidecar) BookingAddr() string { return s.bookingLn.Addr().String() }

// BookingListen is the booking API's address as --listen takes it, once
// started: host:port, or unix:///PATH.
func (s *Sidecar) BookingListen() string { return listen.Address(s.bookingLn.Addr()) }

// OpsAddr is the metrics and health address, once started.
func (s *Sidecar) OpsAddr() string { return s.opsLn.Addr().String() }

// PprofAddr is the pprof address once started, or "" without pprof.
func (s *Sidecar) PprofAddr() string {
	if s.pprofLn == nil {
		return ""
	}
	return s.pprofLn.Addr().String()
}

// Start opens the listeners and starts every part; it returns once the
// listeners accept connections. The config loads in the background: /readyz
// says when it has.
func (s *Sidecar) Start(ctx context.Context) error {
	var err error
	if s.bookingLn, err = listen.Open(s.opts.Listen, s.opts.ListenMode); err != nil {
		return fmt.Errorf("booking API: %w", err)
	}
	if s.opsLn, err = net.Listen("tcp", s.opts.OpsListen); err != nil {
		s.bookingLn.Close()
		return fmt.Errorf("metrics and health: %w", err)
	}
	if s.opts.Pprof {
		if s.pprofLn, err = net.Listen("tcp", s.opts.PprofListen); err != nil {
			s.bookingLn.Close()
			s.opsLn.Close()
			return fmt.Errorf("pprof: %w", err)
		}
	}
	ctx, s.cancel = context.WithCancel(ctx)
	log := s.opts.Log
	s.endpoints.SetOwn(endpoint.LocalAddrs(), tcpAddrs(s.bookingLn, s.opsLn, s.pprofLn))
	if s.opts.AllowLoopbackHintEndpoints {
		log.Info("Hint endpoints on loopback are allowed (--allow-loopback-hint-endpoints): for development only; a worker's word can then send hints to this machine")
	}
	book := &booking.API{Dispatcher: s.Dispatcher, Log: log.WithName("api"), MaxBookingBytes: s.opts.MaxBookingBytes, OtherBodyLimit: admin.BodyLimit,
		Budget: s.bookingBudget, Stage: s.Stage}
	if s.recorder != nil {
		book.Record = s.recorder.Record
		log.Info("Recording sampled bookings as a trace", "path", s.opts.Record.Path, "sampleRate", s.opts.Record.SampleRate)
	}
	book.Other = (&admin.API{Dispatcher: s.Dispatcher, Workers: s.Workers, Log: log.WithName("api"), Book: book.Book, RegistrationOff: s.registrationOff(),
		Outcomes: s.Outcomes}).Handler()
	var checks []func() error
	if s.pods != nil {
		checks = append(checks, s.pods.Synced)
	}
	if s.file != nil {
		checks = append(checks, s.file.Ready)
	}
	ready := func() error {
		for _, c := range checks {
			if err := c(); err != nil {
				return err
			}
		}
		return nil
	}

	s.goRun(func() {
		switch o := s.opts; {
		case o.ConfigFile != "":
			configsource.FileSource{Path: o.ConfigFile, Poll: o.Poll}.Run(ctx, s.Dispatcher, log.WithName("config"))
		case o.ConfigDir != "":
			src := configsource.DirSource(o.ConfigDir, o.Poll)
			src.OnWorkerSelectors, src.Candidates, src.OnStatus = s.applyPools, s.Stage, s.reportStatus
			src.OnCandidateWorkerSelectors = s.applyCandidatePools
			src.Run(ctx, s.Dispatcher, log.WithName("config"))
		default:
			configsource.ConfigMapSource{Client: o.Kube, Namespace: o.Namespace, Name: o.ConfigMap, OnWorkerSelectors: s.applyPools,
				Candidates: s.Stage, OnCandidateWorkerSelectors: s.applyCandidatePools, OnStatus: s.reportStatus}.Run(ctx, s.Dispatcher, log.WithName("config"))
		}
	})
	if s.file != nil {
		s.goRun(func() {
			s.file.Run(ctx, s.Workers, log.WithName("workers"))
		})
	}
	if s.pods != nil {
		s.goRun(func() { s.pods.Run(ctx, log.WithName("workers")) })
	}
	if s.reporter != nil {
		s.goRun(func() { s.reporter.Run(ctx, log.WithName("pod-report")) })
	}
	lim := listen.Limits{Read: s.opts.ReadTimeout, Write: s.opts.WriteTimeout, Idle: s.opts.IdleTimeout}
	pprofLim := lim
	pprofLim.Write = max(lim.Write, listen.PprofWriteTimeout)
	s.bookingConns = s.listeners.Cap("booking", s.bookingLn, s.opts.MaxBookingConns)
	s.booking = booking.NewServer(book.Handler(), lim, log.WithName("booking-server"))
	s.booking.ExpectHandler = book.ExpectBody
	s.goRun(func() {
		if err := s.booking.Serve(s.bookingConns); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error(err, "HTTP server stopped", "listener", "booking", "addr", s.BookingListen())
		}
	})
	type server struct {
		name string
		ln   net.Listener
		max  int
		h    http.Handler
		lim  listen.Limits
	}
	opsMux := http.NewServeMux()
	opsMux.Handle("/", ops.Handler(s.Metrics, s.Dispatcher, ready))
	opsMux.Handle(rolloutapi.OutcomesPath, outcomes.Handler(s.Outcomes, s.opts.PodName, s.Stage))
	servers := []server{{"ops", s.opsLn, s.opts.MaxOpsConns, opsMux, lim}}
	if s.pprofLn != nil {
		servers = append(servers, server{"pprof", s.pprofLn, listen.MaxPprofConns, ops.PprofHandler(), pprofLim})
	}
	for _, srv := range servers {
		cl := s.listeners.Cap(srv.name, srv.ln, srv.max)
		hs := listen.NewHTTPServer(srv.h, srv.lim)
		s.servers = append(s.servers, hs)
		s.goRun(func() {
			if err := hs.Serve(cl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "HTTP server stopped", "listener", srv.name, "addr", cl.Addr().String())
			}
		})
	}
	log.Info("Sidecar started", "bookings", s.BookingListen(), "ops", s.OpsAddr(), "pprof", s.PprofAddr(),
		"readTimeout", lim.Read, "writeTimeout", lim.Write, "idleTimeout", lim.Idle,
		"maxBookingConnections", s.opts.MaxBookingConns, "maxOpsConnections", s.opts.MaxOpsConns,
		"maxWorkerConnections", s.opts.MaxWorkerConns, "maxBookingMemory", s.opts.MaxBookingMemory)
	return nil
}

// registrationOff is why the API may not register workers, or "": it may
// only in standalone mode, where a workers file or the API is the source.
func (s *Sidecar) registrationOff() string {
	if s.opts.ConfigMap != "" || s.opts.WorkerPods {
		return "the sidecar watches worker pods (--router, --configmap or --worker-pods); its workers are the pods the RouterRoles' workerSelectors pick"
	}
	return ""
}

// tcpAddrs are the TCP addresses of the listeners that are open.
func tcpAddrs(lns ...net.Listener) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			out = append(out, a.AddrPort())
		}
	}
	return out
}

// applyPools makes the roles' worker pools of the config source the
// registry's. Every role of a compiled config has a pool (one that
// selects everything where the role has no selector); a role without one
// admits no worker. Pods outside every pool stop being workers unless
// some role takes every worker (or no pools are known).
func (s *Sidecar) applyPools(pools map[string]labels.Selector) {
	open := pools == nil || len(s.Dispatcher.Roles()) == 0 || takesAny(pools)
	if s.pods != nil {
		s.pods.SetPools(pools, open)
	} else {
		s.Workers.SetPools(pools)
	}
	s.opts.Log.V(1).Info("Applied worker pools", "pools", poolNames(pools), "othersAdmitted", open)
}

// applyCandidatePools makes a staged candidate's worker pools those its
// bookings are held to, and adds the pods they pick to the workers; nil
// when no candidate runs.
func (s *Sidecar) applyCandidatePools(pools map[string]labels.Selector) {
	open := takesAny(pools)
	if s.pods != nil {
		s.pods.SetCandidatePools(pools, open)
	} else {
		s.Workers.SetCandidatePools(pools)
	}
	s.opts.Log.V(1).Info("Applied the candidate's worker pools", "pools", poolNames(pools), "othersAdmitted", open)
}

// takesAny reports whether a role of pools takes every worker.
func takesAny(pools map[string]labels.Selector) bool {
	for _, sel := range pools {
		if sel.Empty() {
			return true
		}
	}
	return false
}

// poolNames says pools for a log, sorted.
func poolNames(pools map[string]labels.Selector) []string {
	names := make([]string, 0, len(pools))
	for role, sel := range pools {
		names = append(names, role+": "+sel.String())
	}
	slices.Sort(names)
	return names
}

// reportStatus writes the config status on the sidecar's pod, when it
// reports on one.
func (s *Sidecar) reportStatus(cs rolloutapi.ConfigStatus) {
	if s.reporter != nil {
		s.reporter.ReportConfigStatus(cs)
	}
}

func (s *Sidecar) goRun(f func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
}

// Shutdown stops taking bookings, drains queued hints for up to
// Options.ShutdownWait (or until ctx is done), and stops every part.
//
// The listeners close first. Bookings in flight get a short grace
// (shutdownGrace) to finish and queue their hints; connections still open
// then are clients stalled mid-request, and are closed rather than waited
// for: they must not spend the budget the hints need. The rest of the
// budget drains the queues.
func (s *Sidecar) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownWait)
	defer cancel()
	gctx, gcancel := context.WithTimeout(ctx, shutdownGrace(s.opts.ShutdownWait))
	var (
		wg     sync.WaitGroup
		forced atomic.Int64
	)
	if s.booking != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.booking.ShutdownWithContext(gctx)
			// The server closes its listener only once it serves it: a
			// shutdown right after Start could come first.
			s.bookingConns.Close()
			if err != nil {
				forced.Add(1)
				s.bookingConns.CloseConns()
			}
		}()
	}
	for _, hs := range s.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(gctx); err != nil {
				forced.Add(1)
				hs.Close()
			}
		}()
	}
	wg.Wait()
	gcancel()
	if n := forced.Load(); n > 0 {
		s.opts.Log.Info("Closed client connections still open after the shutdown grace", "servers", n, "grace", shutdownGrace(s.opts.ShutdownWait))
	}
	var errs []error
	if s.recorder != nil {
		// The booking listener is closed: nothing records any more.
		if err := s.recorder.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing the recorded trace: %w", err))
		}
	}
	if err := s.Delivery.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining hints: %w", err))
	}
	s.cancel()
	s.wg.Wait()
	return errors.Join(errs...)
}

// shutdownGrace is how long bookings in flight may take to finish at
// shutdown: a fifth of the budget, at most a second. A booking is answered
// in microseconds; what takes longer is a stalled client.
func shutdownGrace(budget time.Duration) time.Duration { return min(budget/5, time.Second) }

// Run starts the sidecar and shuts it down when ctx is done.
func (s *Sidecar) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	s.opts.Log.Info("Shutting down", "drainDeadline", s.opts.ShutdownWait)
	return s.Shutdown(context.Background())
}

// registryDelivery is delivery as the registry knows it (workers.Delivery).
type registryDelivery struct{ *delivery.Delivery }

func (d registryDelivery) Queue(worker, endpoint string) workers.Queue {
	return d.NewQueue(worker, endpoint)
}
