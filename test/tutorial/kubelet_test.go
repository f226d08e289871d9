package tutorial

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// kubelet runs, as child processes of the test, the containers of the pods
// kwok runs on its fake node: kwok plays the node and the pod status, this
// plays the container runtime, so that the manager and the router pods of
// the docs really run. It also binds pending pods to the node, as no
// scheduler runs.
//
// Each pod is given a loopback address of its own (127.38.x.y), which
// stands for its network namespace: a container's address 127.0.0.1 or
// ":PORT" in its arguments becomes that address, and status.podIP in its
// environment too. Two pods thus never share a port, as on a node. A
// container's ServiceAccount token is a token of its pod's ServiceAccount
// bound to the pod (KUBECONFIG), what the mounted token is in a cluster;
// the manager also gets --leader-election-namespace, the namespace a
// cluster's mounted ServiceAccount files tell it.
type kubelet struct {
	t      *testing.T
	cs     *kubernetes.Clientset
	cfg    *rest.Config
	node   string
	images map[string]string // image name (no tag) -> binary
	dir    string

	mu     sync.Mutex
	pods   map[types.UID]*podRun
	nextIP int
}

type podRun struct {
	ns, name, ip string
	procs        []*exec.Cmd
	done         []chan struct{}
	logs         []string
}

func newKubelet(t *testing.T, cfg *rest.Config, node string, images map[string]string) *kubelet {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &kubelet{t: t, cs: cs, cfg: cfg, node: node, images: images, dir: t.TempDir(), pods: map[types.UID]*podRun{}}
}

// run syncs every 200ms until ctx ends, then stops every process.
func (k *kubelet) run(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			k.t.Logf("kubelet: %v", err)
		}
		select {
		case <-ctx.Done():
			k.mu.Lock()
			for uid, p := range k.pods {
				p.stop()
				delete(k.pods, uid)
			}
			k.mu.Unlock()
			return
		case <-tick.C:
		}
	}
}

func (k *kubelet) sync(ctx context.Context) error {
	pods, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
		case p.Spec.NodeName == "":
			err := k.cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: k.node},
			}, metav1.CreateOptions{})
			if err != nil {
				k.t.Logf("kubelet: binding pod %s/%s: %v", p.Namespace, p.Name, err)
			}
		case p.Spec.NodeName == k.node && p.Status.Phase == corev1.PodRunning:
			live[p.UID] = true
			k.mu.Lock()
			_, started := k.pods[p.UID]
			k.mu.Unlock()
			if !started {
				if err := k.start(ctx, p); err != nil {
					k.t.Errorf("kubelet: starting pod %s/%s: %v", p.Namespace, p.Name, err)
					k.mu.Lock()
					k.pods[p.UID] = &podRun{ns: p.Namespace, name: p.Name}
					k.mu.Unlock()
				}
			}
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for uid, p := range k.pods {
		if !live[uid] {
			p.stop()
			delete(k.pods, uid)
		}
	}
	return nil
}

// podIP returns the loopback address of a running pod.
func (k *kubelet) podIP(ns, name string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		if p.ns == ns && p.name == name && p.ip != "" {
			return p.ip, true
		}
	}
	return "", false
}

// logsOf returns the last lines of every container log of the pods
// started, for a failing test.
func (k *kubelet) logsOf() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	for _, p := range k.pods {
		for _, l := range p.logs {
			fmt.Fprintf(&b, "--- %s\n%s\n", l, tail(l, 15))
		}
	}
	return b.String()
}

func (k *kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	k.mu.Lock()
	k.nextIP++
	ip := fmt.Sprintf("127.38.%d.%d", k.nextIP/250, k.nextIP%250+1)
	k.mu.Unlock()
	run := &podRun{ns: pod.Namespace, name: pod.Name, ip: ip}
	var containers []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			return fmt.Errorf("init container %s runs to completion; only native sidecars are run here", c.Name)
		}
		containers = append(containers, c)
	}
	containers = append(containers, pod.Spec.Containers...)
	var kubeconfig string
	for _, c := range containers {
		image, _, _ := strings.Cut(c.Image, ":")
		bin, ok := k.images[image]
		if !ok {
			return fmt.Errorf("container %s: image %s is none the test can run (%v)", c.Name, c.Image, k.images)
		}
		if len(c.Command) > 0 {
			return fmt.Errorf("container %s: a command (%q) replaces the image's entrypoint; not run here", c.Name, c.Command)
		}
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = inPod(a, ip)
		}
		env, err := testenv.ContainerEnv(pod, &c, ip)
		if err != nil {
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
		if len(args) > 0 && (args[0] == "manager" || args[0] == "sidecar") {
			if kubeconfig == "" {
				if kubeconfig, err = k.boundKubeconfig(ctx, pod); err != nil {
					return err
				}
			}
			env = append(env, "KUBECONFIG="+kubeconfig)
			if args[0] == "manager" {
				args = append(args, "--leader-election-namespace="+pod.Namespace)
			}
		}
		log := filepath.Join(k.dir, pod.Namespace+"_"+pod.Name+"_"+c.Name+".log")
		f, err := os.Create(log)
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(env, "HOME="+k.dir, "PATH=/usr/bin:/bin")
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			f.Close()
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); f.Close(); close(done) }()
		run.procs = append(run.procs, cmd)
		run.done = append(run.done, done)
		run.logs = append(run.logs, log)
	}
	k.mu.Lock()
	k.pods[pod.UID] = run
	k.mu.Unlock()
	k.t.Logf("kubelet: pod %s/%s runs at %s (%d containers)", pod.Namespace, pod.Name, ip, len(containers))
	return nil
}

func (p *podRun) stop() {
	for _, c := range p.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	for i, c := range p.procs {
		select {
		case <-p.done[i]:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
}

// inPod moves a listen or connect address of a container's argument onto
// its pod's address: 127.0.0.1:P, 0.0.0.0:P and a bare :P.
func inPod(arg, ip string) string {
	arg = strings.ReplaceAll(arg, "127.0.0.1:", ip+":")
	arg = strings.ReplaceAll(arg, "0.0.0.0:", ip+":")
	if k, v, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(v, ":") {
		return k + "=" + ip + v
	}
	return arg
}

// boundKubeconfig writes a kubeconfig with a token of the pod's
// ServiceAccount bound to the pod.
func (k *kubelet) boundKubeconfig(ctx context.Context, pod *corev1.Pod) (string, error) {
	path := filepath.Join(k.dir, pod.Namespace+"_"+pod.Name+".kubeconfig")
	return path, testenv.WriteBoundKubeconfig(ctx, k.cs, k.cfg, pod, path)
}

// forward is `kubectl port-forward`'s part that needs a kubelet: it
// listens on 127.0.0.1:local and copies each connection to the pod's
// address at remote.
func forward(ctx context.Context, local int, podAddr string) (func(), error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var d net.Dialer
				up, err := d.DialContext(ctx, "tcp", podAddr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return func() { ln.Close() }, nil
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
