package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// OpsPortName is the name of the sidecar container's port that serves
// the ops routes (health, metrics, outcomes).
const OpsPortName = "kvhint-ops"

// SidecarOptions bound what the sidecar provider does.
type SidecarOptions struct {
	// Timeout bounds one pod's answer, connection included. Default 5s.
	Timeout time.Duration
	// MaxBodyBytes bounds one pod's answer. Default 16 MiB: a sidecar
	// holds at most 4 config hashes of 16,384 samples, about 128 bytes
	// each in JSON with the longest of Dynamo's role names, 8.4 MB in
	// all; a larger answer leaves the pod unanswered.
	MaxBodyBytes int64
	// Concurrency bounds the pods asked at once. Default 8.
	Concurrency int
	// AllowLoopback lets a pod IP be a loopback address: for a local
	// development control plane, whose sidecars run on the host. Never
	// in a cluster: a pod that reports 127.0.0.1 would steer the manager
	// to its own host.
	AllowLoopback bool
}

func (o SidecarOptions) withDefaults() SidecarOptions {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	return o
}

// Sidecars is the default provider: it asks each router pod's sidecar
// for its outcomes (rolloutapi.OutcomesPath) at the pod's IP and the
// sidecar's ops port, and nowhere else: no address from an annotation,
// no proxy, no redirect.
type Sidecars struct {
	opts   SidecarOptions
	client *http.Client
}

// NewSidecars returns a sidecar provider.
func NewSidecars(o SidecarOptions) *Sidecars {
	o = o.withDefaults()
	dialer := &net.Dialer{Timeout: o.Timeout, Control: dialControl(o.AllowLoopback)}
	transport := &http.Transport{
		// Never a proxy from the environment: the pod is asked directly.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ResponseHeaderTimeout: o.Timeout,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       time.Minute,
		DisableCompression:    true,
	}
	return &Sidecars{opts: o, client: &http.Client{
		Transport: transport,
		Timeout:   o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// ErrAddressRefused is wrapped by the errors of pods whose address the
// provider will not ask.
var ErrAddressRefused = errors.New("address refused")

// Target is where the provider asks pod: its status.podIP and the port
// named kvhint-ops of one of its containers (an init container, for a
// sidecar that runs as a restartable init container). It refuses an IP
// that is unspecified, multicast, link-local, broadcast or zoned, and a
// loopback one unless allowLoopback.
func Target(pod *corev1.Pod, allowLoopback bool) (netip.AddrPort, error) {
	name := pod.Namespace + "/" + pod.Name
	if pod.Status.PodIP == "" {
		return netip.AddrPort{}, fmt.Errorf("pod %s has no IP yet", name)
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("pod %s: status.podIP %q is not an IP address: %w", name, pod.Status.PodIP, ErrAddressRefused)
	}
	if err := checkIP(ip, allowLoopback); err != nil {
		return netip.AddrPort{}, fmt.Errorf("pod %s: status.podIP %s: %w", name, ip, err)
	}
	port, err := opsPort(pod)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("pod %s: %w", name, err)
	}
	return netip.AddrPortFrom(ip.Unmap(), port), nil
}

// checkIP refuses the addresses the manager must never be steered to.
func checkIP(ip netip.Addr, allowLoopback bool) error {
	switch ip = ip.Unmap(); {
	case ip.Zone() != "":
		return fmt.Errorf("a zoned address: %w", ErrAddressRefused)
	case ip.IsUnspecified():
		return fmt.Errorf("unspecified: %w", ErrAddressRefused)
	case ip.IsMulticast():
		return fmt.Errorf("multicast: %w", ErrAddressRefused)
	case ip.IsLinkLocalUnicast():
		return fmt.Errorf("link-local: %w", ErrAddressRefused)
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("broadcast: %w", ErrAddressRefused)
	case ip.IsLoopback() && !allowLoopback:
		return fmt.Errorf("loopback (allowed only for a local development control plane): %w", ErrAddressRefused)
	}
	return nil
}

// opsPort is the container port named kvhint-ops (port names are unique
// in a pod).
func opsPort(pod *corev1.Pod) (uint16, error) {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.Name != OpsPortName {
					continue
				}
				if p.ContainerPort < 1 || p.ContainerPort > 65535 {
					return 0, fmt.Errorf("container %q port %s: %d is not a port number: %w", c.Name, OpsPortName, p.ContainerPort, ErrAddressRefused)
				}
				if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
					return 0, fmt.Errorf("container %q port %s: protocol %s, want TCP: %w", c.Name, OpsPortName, p.Protocol, ErrAddressRefused)
				}
				return uint16(p.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("no container has a port named %s", OpsPortName)
}

// dialControl checks, at the socket, that the address dialed is one
// Target allows: the URL holds an IP literal, so this is the same check
// again, there so that no path around Target reaches another address.
func dialControl(allowLoopback bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dialing %s: %w", address, ErrAddressRefused)
		}
		if err := checkIP(ap.Addr(), allowLoopback); err != nil {
			return fmt.Errorf("dialing %s: %w", address, err)
		}
		return nil
	}
}

// Fetch asks every pod for its outcomes at or after since, at most
// Concurrency at once. It returns the answers, and a Source per pod in
// the order given: a pod that serves no requests (not Running, or
// terminating) is Skipped; one that has no allowed address or did not
// answer in time with a valid answer carries an Error.
func (s *Sidecars) Fetch(ctx context.Context, pods []corev1.Pod, since time.Time) ([]rolloutapi.Outcomes, []Source) {
	sources := make([]Source, len(pods))
	answers := make([]*rolloutapi.Outcomes, len(pods))
	sem := make(chan struct{}, s.opts.Concurrency)
	var wg sync.WaitGroup
	for i := range pods {
		pod := &pods[i]
		sources[i].Name = pod.Name
		switch {
		case pod.DeletionTimestamp != nil:
			sources[i].Skipped = "terminating"
			continue
		case pod.Status.Phase != corev1.PodRunning:
			sources[i].Skipped = fmt.Sprintf("%s, not Running", phaseOf(pod))
			continue
		}
		target, err := Target(pod, s.opts.AllowLoopback)
		if err != nil {
			sources[i].Error = err.Error()
			continue
		}
		sources[i].Address = target.String()
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				sources[i].Error = ctx.Err().Error()
				return
			}
			defer func() { <-sem }()
			o, err := s.fetchOne(ctx, pod.Name, target, since)
			if err != nil {
				sources[i].Error = err.Error()
				return
			}
			answers[i] = o
		})
	}
	wg.Wait()
	var out []rolloutapi.Outcomes
	for _, a := range answers {
		if a != nil {
			out = append(out, *a)
		}
	}
	return out, sources
}

func phaseOf(pod *corev1.Pod) corev1.PodPhase {
	if pod.Status.Phase == "" {
		return corev1.PodPending
	}
	return pod.Status.Phase
}

// fetchOne asks one sidecar.
func (s *Sidecars) fetchOne(ctx context.Context, pod string, target netip.AddrPort, since time.Time) (*rolloutapi.Outcomes, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	url := "http://" + target.String() + rolloutapi.OutcomesPath + "?since=" + strconv.FormatInt(since.UnixMilli(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err // names the method and URL
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: answered %s: %.200s", url, resp.Status, body)
	}
	if int64(len(body)) > s.opts.MaxBodyBytes {
		return nil, fmt.Errorf("GET %s: the answer exceeds %d bytes", url, s.opts.MaxBodyBytes)
	}
	var o rolloutapi.Outcomes
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, fmt.Errorf("GET %s: the answer is not outcomes: %w", url, err)
	}
	if o.Pod != "" && o.Pod != pod {
		// The IP now belongs to another pod (the one asked was replaced).
		return nil, fmt.Errorf("GET %s: answered for pod %q", url, o.Pod)
	}
	for hash := range o.Configs {
		if !rolloutapi.ValidHash(hash) {
			return nil, fmt.Errorf("GET %s: config %q is not a config hash", url, hash)
		}
	}
	if o.Pod == "" {
		o.Pod = pod
	}
	return &o, nil
}

// Measure fetches the pods' outcomes since q.Since and splits them into
// the stable and the candidate arms; every pod that did not answer is
// named in Input.Unanswered, which keeps the measurement from passing.
func (s *Sidecars) Measure(ctx context.Context, q Query) (Measurement, error) {
	if err := q.check(); err != nil {
		return Measurement{}, err
	}
	outcomes, sources := s.Fetch(ctx, q.Pods, q.Since)
	m := Measurement{Sources: sources, Shadow: analysis.SumShadow(q.Candidate, outcomes)}
	m.Input.Baseline, m.Input.Canary = analysis.ArmsFromOutcomes(outcomes, q.Stable, q.Candidate, q.Since.UnixMilli())
	for _, src := range sources {
		if src.Error != "" {
			m.Input.Unanswered = append(m.Input.Unanswered, src.Name)
		}
	}
	return m, nil
}
