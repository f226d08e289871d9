package devenv

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/config/samples"
	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// FieldOwner is the server-side apply field manager of what devenv writes.
const FieldOwner = "kvhint-dev"

// Options shape an environment.
type Options struct {
	// Bin is the kvhint binary the manager and the sidecars run.
	Bin string
	// WorkerBin is the binary whose sim-worker subcommand runs the
	// simulated workers: kvhint-dev, as kvhint has no sim-worker. Empty:
	// Bin (kvhint-dev dev, whose one binary has every subcommand).
	WorkerBin string
	// Assets holds kube-apiserver and etcd.
	Assets string
	// Dir receives the kubeconfig and the processes' logs.
	Dir string
	// Namespace holds the samples, the router pods and the worker pods.
	Namespace string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// BookingSocket runs each sidecar's booking API on a Unix socket in
	// Dir (--listen unix:///PATH) instead of a loopback port, and the
	// bookings go over it.
	BookingSocket bool
	// HintPath is where the front routers carry hints on the requests
	// they forward; the zero value is kv_transfer_params.kv_hint.
	HintPath dispatch.InBandPath
	// PushHints makes the worker pods also advertise their hint endpoint,
	// so that the sidecars push every hint to it as well. Off, as no
	// engine known today opens one: hints arrive in-band only.
	PushHints bool
	// ManagerBin is the kvhint binary the manager runs; empty: Bin. A
	// manager built with a plugin the sidecars lack stands for one
	// upgraded before the router pods.
	ManagerBin string
	// RouterPods is the number of router pods of each sample router, each
	// a sidecar and a front router; 0 means 1. A staged rollout is judged
	// over every pod of a router, so its tests run two or more.
	RouterPods int
}

// workerBin is the binary the simulated workers run.
func (e *Env) workerBin() string {
	if e.Opts.WorkerBin != "" {
		return e.Opts.WorkerBin
	}
	return e.Opts.Bin
}

// Worker is a simulated worker process and the Pod object that advertises it.
type Worker struct {
	ID string
	// Router and Component are the pod labels the samples' workerSelectors pick.
	Router, Component string
	// RouterHint is whether the pod advertises router_hint.
	RouterHint bool
	// HintEndpoint is whether the pod advertises a hint endpoint to push
	// hints to (Options.PushHints).
	HintEndpoint bool
	URL          string
	Proc         *Process
}

// Sidecar is one router's sidecar process and the router Pod it reports on.
type Sidecar struct {
	Router  string
	PodName string
	// BookingURL is the booking API base URL (http://127.0.0.1:PORT), or
	// unix:///PATH of its socket with Options.BookingSocket; OpsURL serves
	// /metrics and /readyz.
	BookingURL, OpsURL string
	Proc               *Process
}

// Env is a running local installation: control plane, manager, one sidecar
// per sample router, simulated workers, and a front router per sample
// router with workers.
type Env struct {
	Opts     Options
	CP       *controlplane.ControlPlane
	Client   client.Client
	Manager  *Process
	ProbeURL string
	// MetricsURL is the manager's metrics endpoint: HTTPS with a
	// self-signed certificate, for a bearer token allowed to get /metrics.
	MetricsURL string
	Sidecars   []*Sidecar
	Workers    []*Worker
	// Fronts take completion requests, book them through their router's
	// sidecar and forward them to the booked workers, hints in-band.
	Fronts []*FrontRouter
}

// Routers of config/samples and the workers devenv gives them. One llama
// decode worker does not advertise router_hint, so a run shows that it
// receives nothing.
var topology = []struct {
	router  string
	workers []Worker
}{
	{"llama", []Worker{
		{ID: "llama-prefill-0", Component: "prefill", RouterHint: true},
		{ID: "llama-prefill-1", Component: "prefill", RouterHint: true},
		{ID: "llama-decode-0", Component: "decode", RouterHint: true},
		{ID: "llama-decode-1", Component: "decode", RouterHint: false},
	}},
	{"chat", []Worker{
		{ID: "chat-0", Component: "decode", RouterHint: true},
		{ID: "chat-1", Component: "decode", RouterHint: true},
	}},
	{"embed", nil},
}

func (e *Env) say(format string, args ...any) {
	if e.Opts.Progress != nil {
		fmt.Fprintf(e.Opts.Progress, "kvhint-dev dev: "+format+"\n", args...)
	}
}

// Scheme knows the core types and this project's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}

// Start brings everything up, in dependency order, and waits until the
// manager and every sidecar answer their readiness probes. On error it
// stops what it started.
func Start(ctx context.Context, o Options) (_ *Env, err error) {
	e := &Env{Opts: o}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	e.say("starting kube-apiserver and etcd on loopback")
	if e.CP, err = controlplane.Start(controlplane.Options{Assets: o.Assets, Dir: o.Dir, ProductCRDs: true}); err != nil {
		return nil, err
	}
	if e.Client, err = client.New(e.CP.Config, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	if err := e.ensureNamespace(ctx); err != nil {
		return nil, err
	}
	e.say("control plane up; kubeconfig %s", e.CP.Kubeconfig)

	if err := e.startWorkers(ctx); err != nil {
		return nil, err
	}
	if err := e.StartManager(ctx); err != nil {
		return nil, err
	}
	if err := e.startSidecars(ctx); err != nil {
		return nil, err
	}
	if err := e.startFronts(); err != nil {
		return nil, err
	}
	return e, nil
}

// startFronts starts a front router for every sample router with workers:
// its roles are the workers' components, prefill before decode, and a
// prefill booking on a worker that did not serve the session's last turn
// commits a KV copy of that turn's blocks (prefillCopyRate).
func (e *Env) startFronts() error {
	for _, t := range topology {
		var roles []frontRole
		for _, name := range []string{"prefill", "decode"} {
			r := frontRole{name: name}
			if name == "prefill" {
				r.copyRate = prefillCopyRate
			}
			for _, w := range e.Workers {
				if w.Router == t.router && w.Component == name {
					r.workers = append(r.workers, w)
				}
			}
			if len(r.workers) > 0 {
				roles = append(roles, r)
			}
		}
		if len(roles) == 0 {
			continue
		}
		// One front router per router pod, each booking through its own
		// pod's sidecar, as a router and its sidecar share a pod.
		for _, s := range e.Sidecars {
			if s.Router != t.router {
				continue
			}
			f, err := startFrontRouter(t.router, roles, s, e.Opts.HintPath)
			if err != nil {
				return err
			}
			f.Pod = s.PodName
			e.Fronts = append(e.Fronts, f)
			e.say("router %s (pod %s) takes completion requests at %s (/v1/completions, /v1/chat/completions), hints carried at %s", t.router, s.PodName, f.URL, e.Opts.HintPath)
		}
	}
	return nil
}

func (e *Env) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.Opts.Namespace}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", e.Opts.Namespace, err)
	}
	return nil
}

func (e *Env) startWorkers(ctx context.Context) error {
	for _, t := range topology {
		for _, w := range t.workers {
			w := w
			w.Router = t.router
			w.HintEndpoint = e.Opts.PushHints
			port, err := FreePort()
			if err != nil {
				return err
			}
			w.URL = "http://127.0.0.1:" + strconv.Itoa(port)
			typ := w.Component
			w.Proc = NewProcess("worker-"+w.ID, e.workerBin(), []string{"sim-worker", "--id", w.ID,
				"--listen", "127.0.0.1:" + strconv.Itoa(port), "--worker-type", typ}, nil, e.Opts.Dir)
			if err := w.Proc.Start(); err != nil {
				return err
			}
			e.Workers = append(e.Workers, &w)
		}
	}
	for _, w := range e.Workers {
		if err := waitCtx(ctx, 30*time.Second, func(c context.Context) error { return w.Proc.WaitHTTP(c, w.URL+"/healthz") }); err != nil {
			return err
		}
		if err := e.applyWorkerPod(ctx, w); err != nil {
			return err
		}
	}
	e.say("%d simulated workers up", len(e.Workers))
	return nil
}

// applyWorkerPod creates the Pod object a sidecar discovers the worker by.
// No kubelet runs it: the process above is the worker, the Pod only
// advertises it, as a real worker pod's annotations would. The hint
// endpoint is advertised only with Options.PushHints: a sidecar pushes
// only to a worker that opts in.
func (e *Env) applyWorkerPod(ctx context.Context, w *Worker) error {
	ann := map[string]string{
		wellknown.WorkerTypeAnnotation: w.Component,
	}
	if w.HintEndpoint {
		ann[wellknown.HintEndpointAnnotation] = w.URL + simworker.HintPath
	}
	if w.RouterHint {
		ann[wellknown.CapabilitiesAnnotation] = "router_hint"
	}
	pod := placeholderPod(e.Opts.Namespace, w.ID, map[string]string{
		"app.kubernetes.io/name":      w.Router,
		"app.kubernetes.io/component": w.Component,
	}, ann)
	return e.createPod(ctx, pod)
}

func placeholderPod(ns, name string, labels, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "kvhint.local/placeholder:dev"}}},
	}
}

func (e *Env) createPod(ctx context.Context, pod *corev1.Pod) error {
	if err := e.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	return nil
}

// StartManager starts (or restarts) kvhint manager and waits for /readyz.
func (e *Env) StartManager(ctx context.Context) error {
	if e.Manager == nil {
		metrics, err := FreePort()
		if err != nil {
			return err
		}
		probe, err := FreePort()
		if err != nil {
			return err
		}
		e.ProbeURL = "http://127.0.0.1:" + strconv.Itoa(probe)
		e.MetricsURL = "https://127.0.0.1:" + strconv.Itoa(metrics) + "/metrics"
		e.Manager = NewProcess("manager", cmp.Or(e.Opts.ManagerBin, e.Opts.Bin), []string{"manager",
			"--kubeconfig", e.CP.Kubeconfig, "--namespace", e.Opts.Namespace,
			"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metrics),
			"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probe),
			// The router pods' sidecars run on loopback (no kubelet gives
			// them an address): only development lets a RouterRollout's
			// analysis ask them for outcomes there.
			"--rollout-allow-loopback-pods"}, nil, e.Opts.Dir)
	}
	if err := e.Manager.Start(); err != nil {
		return err
	}
	if err := waitCtx(ctx, time.Minute, func(c context.Context) error { return e.Manager.WaitHTTP(c, e.ProbeURL+"/readyz") }); err != nil {
		return err
	}
	e.say("manager up (log %s)", e.Manager.Log)
	return nil
}

func (e *Env) startSidecars(ctx context.Context) error {
	for _, t := range topology {
		for i := range max(e.Opts.RouterPods, 1) {
			if err := e.startSidecar(ctx, t.router, fmt.Sprintf("%s-router-%d", t.router, i)); err != nil {
				return err
			}
		}
	}
	// Their /readyz stays 503 until a compiled config has loaded, that is
	// until samples are applied: wait for /healthz only.
	for _, s := range e.Sidecars {
		if err := waitCtx(ctx, 30*time.Second, func(c context.Context) error { return s.Proc.WaitHTTP(c, s.OpsURL+"/healthz") }); err != nil {
			return err
		}
	}
	if e.Opts.BookingSocket {
		e.say("%d sidecars up, %d per router, booking on Unix sockets in %s", len(e.Sidecars), max(e.Opts.RouterPods, 1), e.Opts.Dir)
	} else {
		e.say("%d sidecars up, %d per router", len(e.Sidecars), max(e.Opts.RouterPods, 1))
	}
	return nil
}

// startSidecar starts the sidecar of one router pod, and makes its Pod
// object say what a kubelet would of it: Running, on loopback (the
// process's address), its sidecar container's ops port named as the
// injection names it, where the manager asks it for a staged rollout's
// outcomes.
func (e *Env) startSidecar(ctx context.Context, router, podName string) error {
	s := &Sidecar{Router: router, PodName: podName}
	listen, err := e.bookingListen(podName)
	if err != nil {
		return err
	}
	ops, err := FreePort()
	if err != nil {
		return err
	}
	pod := placeholderPod(e.Opts.Namespace, s.PodName, map[string]string{v1alpha1.RouterLabel: router}, nil)
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "kvhint-sidecar", Image: "kvhint.local/kvhint:dev",
		Ports: []corev1.ContainerPort{{Name: OpsPortName, ContainerPort: int32(ops), Protocol: corev1.ProtocolTCP}}})
	if err := e.createPod(ctx, pod); err != nil {
		return err
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.1"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	if err := e.Client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("pod %s status: %w", pod.Name, err)
	}
	s.BookingURL = listen
	if !e.Opts.BookingSocket {
		s.BookingURL = "http://" + listen
	}
	s.OpsURL = "http://127.0.0.1:" + strconv.Itoa(ops)
	s.Proc = NewProcess("sidecar-"+podName, e.Opts.Bin, []string{"sidecar",
		"--router", router, "--namespace", e.Opts.Namespace, "--kubeconfig", e.CP.Kubeconfig,
		// The simulated workers run on loopback, not on their pods' IPs
		// (no kubelet gives them one), so their pods advertise absolute
		// URLs on loopback, which only development allows.
		"--allow-absolute-hint-endpoints", "--allow-loopback-hint-endpoints",
		"--pod-name", s.PodName, "--pod-namespace", e.Opts.Namespace,
		"--listen", listen, "--metrics-listen", "127.0.0.1:" + strconv.Itoa(ops)}, nil, e.Opts.Dir)
	if err := s.Proc.Start(); err != nil {
		return err
	}
	e.Sidecars = append(e.Sidecars, s)
	return nil
}

// OpsPortName names the sidecar container's ops port, as the injection
// names it and the manager looks it up.
const OpsPortName = "kvhint-ops"

// bookingListen is a sidecar's --listen: a free loopback port, or a socket
// in Dir (private to this user) with Options.BookingSocket.
func (e *Env) bookingListen(pod string) (string, error) {
	if e.Opts.BookingSocket {
		return "unix://" + filepath.Join(e.Opts.Dir, "booking-"+pod+".sock"), nil
	}
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// WaitSidecarsReady waits until every sidecar has loaded a compiled config.
func (e *Env) WaitSidecarsReady(ctx context.Context, d time.Duration) error {
	for _, s := range e.Sidecars {
		if err := waitCtx(ctx, d, func(c context.Context) error { return s.Proc.WaitHTTP(c, s.OpsURL+"/readyz") }); err != nil {
			return err
		}
	}
	return nil
}

// Sidecar returns the sidecar of a router.
func (e *Env) Sidecar(router string) *Sidecar {
	for _, s := range e.Sidecars {
		if s.Router == router {
			return s
		}
	}
	return nil
}

// ApplySamples server-side applies every object of config/samples.
func (e *Env) ApplySamples(ctx context.Context) (int, error) {
	files, err := samples.Manifests()
	if err != nil {
		return 0, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	n := 0
	for _, name := range names {
		objs, err := DecodeManifests(files[name])
		if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		for _, u := range objs {
			u.SetNamespace(e.Opts.Namespace)
			if err := e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
				return n, fmt.Errorf("%s: applying %s %s: %w", name, u.GetKind(), u.GetName(), err)
			}
			n++
		}
	}
	return n, nil
}

// DecodeManifests splits multi-document YAML into objects.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
}

// Stop ends the front routers and every process, the control plane last,
// and logs nothing.
func (e *Env) Stop() {
	for _, f := range e.Fronts {
		_ = f.Close()
	}
	for _, s := range e.Sidecars {
		_ = s.Proc.Stop(10 * time.Second)
	}
	if e.Manager != nil {
		_ = e.Manager.Stop(10 * time.Second)
	}
	for _, w := range e.Workers {
		_ = w.Proc.Stop(5 * time.Second)
	}
	if e.CP != nil {
		_ = e.CP.Stop()
	}
}

func waitCtx(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(c)
}
