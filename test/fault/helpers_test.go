package fault

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// sidecar is a standalone kvhint sidecar process.
type sidecar struct {
	proc       *devenv.Process
	dir        string
	configPath string
	booking    string // http://127.0.0.1:PORT
	ops        string
}

// sidecarOpts shape startSidecar.
type sidecarOpts struct {
	config  string   // hints YAML
	workers string   // workers file YAML
	args    []string // more flags
	nofile  int      // RLIMIT_NOFILE, soft and hard; 0 leaves it
	// strict runs without --allow-loopback-hint-endpoints, as a real
	// deployment does: no worker may then be on loopback.
	strict bool
	// noWait returns once the process is up (/healthz), not ready.
	noWait bool
	// configDir runs a mounted compiled ConfigMap directory instead of
	// the config file.
	configDir string
	bin       string   // the binary; "" is kvhint
	env       []string // more environment, NAME=value
}

// startSidecar runs `kvhint sidecar` on loopback with a config file and a
// workers file, and waits until it is ready.
func startSidecar(t *testing.T, o sidecarOpts) *sidecar {
	t.Helper()
	dir := t.TempDir()
	s := &sidecar{dir: dir, configPath: filepath.Join(dir, "hints.yaml")}
	writeFile(t, s.configPath, o.config)
	workers := filepath.Join(dir, "workers.yaml")
	writeFile(t, workers, o.workers)
	bp, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	op, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s.booking = "http://127.0.0.1:" + strconv.Itoa(bp)
	s.ops = "http://127.0.0.1:" + strconv.Itoa(op)
	// The attacks here are on the servers, the queues and delivery; the
	// policy deadline has tests of its own (pkg/dispatch, internal/sidecar's
	// load test). A 1 ms deadline on a 2-core machine that also runs
	// 1,500 attacking clients drops a policy now and then (kv-evict once
	// ran 1.18 ms), which would read as a failed booking here.
	source := []string{"--config-file", s.configPath}
	if o.configDir != "" {
		source = []string{"--config-dir", o.configDir}
	}
	args := append(append([]string{"sidecar"}, source...), "--workers-file", workers, "--poll-interval", "200ms",
		"--policy-deadline", "50ms",
		"--listen", "127.0.0.1:"+strconv.Itoa(bp), "--metrics-listen", "127.0.0.1:"+strconv.Itoa(op))
	if !o.strict {
		// The simulated workers and sinks run on loopback.
		args = append(args, "--allow-loopback-hint-endpoints")
	}
	args = append(args, o.args...)
	path := kvhint
	if o.bin != "" {
		path = o.bin
	}
	if o.nofile > 0 {
		// bash sets the soft and hard limits; Go cannot raise them again.
		args = append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, o.nofile), path}, args...)
		path = "/bin/bash"
	}
	s.proc = devenv.NewProcess("sidecar", path, args, o.env, dir)
	if err := s.proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.proc.Kill()
		if t.Failed() {
			t.Logf("sidecar log ends:\n%s", s.proc.Tail(4096))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := "/readyz"
	if o.noWait {
		probe = "/healthz"
	}
	if err := s.proc.WaitHTTP(ctx, s.ops+probe); err != nil {
		t.Fatal(err)
	}
	return s
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// figures are a process's resource use at one moment.
type figures struct {
	FDs, Goroutines int
	RSSMiB          float64
}

func (f figures) String() string {
	return fmt.Sprintf("%d fds, %d goroutines, RSS %.1f MiB", f.FDs, f.Goroutines, f.RSSMiB)
}

// measure reads a process's descriptors and RSS from /proc, and its
// goroutines from its /metrics (go_goroutines).
func measure(t testing.TB, pid int, ops string) figures {
	t.Helper()
	var f figures
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("reading the descriptors of %d: %v", pid, err)
	}
	f.FDs = len(ents)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			f.RSSMiB = float64(kb) / 1024
		}
	}
	if ops != "" {
		f.Goroutines = int(scrape(t, ops)["go_goroutines"])
	}
	return f
}

// scrape reads every series of /metrics into a map keyed by the series
// as exposed ("name{label=\"v\"}").
func scrape(t testing.TB, ops string) map[string]float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(ops + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", ops, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sum adds the series of a metric whose exposed form starts with prefix.
func sum(m map[string]float64, prefix string) float64 {
	total := 0.0
	for k, v := range m {
		if k == prefix || strings.HasPrefix(k, prefix+"{") {
			total += v
		}
	}
	return total
}

// router books like a router does: over a small pool of keep-alive
// connections opened before any fault.
type router struct {
	c   *http.Client
	url string
}

func newRouter(s *sidecar, conns int) *router {
	tr := &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &router{c: &http.Client{Transport: tr, Timeout: 30 * time.Second}, url: s.booking + "/v1/bookings"}
}

// routerPool is n routers of one connection each, each connected by a
// first booking: a router's pool opened before any fault.
func routerPool(t *testing.T, s *sidecar, n int, warm []byte) []*router {
	t.Helper()
	var rs []*router
	for range n {
		r := newRouter(s, 1)
		if code, _, err := r.book(warm); err != nil || code >= 300 {
			t.Fatalf("warm-up booking: %d %v", code, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// book posts one booking and returns its status and latency.
func (r *router) book(body []byte) (int, time.Duration, error) {
	start := time.Now()
	resp, err := r.c.Post(r.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, time.Since(start), err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// latencies collects booking latencies from several goroutines.
type latencies struct {
	mu  sync.Mutex
	d   []time.Duration
	err []string
}

func (l *latencies) add(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, d)
	if err != nil && len(l.err) < 5 {
		l.err = append(l.err, err.Error())
	}
}

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (l *latencies) String() string {
	return fmt.Sprintf("%d bookings: p50 %v, p99 %v, max %v", len(l.d), l.quantile(0.5).Round(time.Microsecond), l.quantile(0.99).Round(time.Microsecond), l.quantile(1).Round(time.Microsecond))
}

// bookingBody is a booking of worker on role decode; with hashes > 0 it
// carries a committed KV copy of that many blocks (a hint of about 21
// bytes per block under kv-fetch).
func bookingBody(id, role, worker string, hashes int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"request_id":%q,"role":%q,"worker":%q,"prompt_tokens":%d,"block_size":16`, id, role, worker, max(4096, 16*hashes))
	if hashes > 0 {
		b.WriteString(`,"committed_kv_copy":{"source_worker":"src","source_endpoint":"tcp://127.0.0.1:1","block_hashes":[`)
		for i := range hashes {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(uint64(i)*0x9e3779b97f4a7c15, 10))
		}
		b.WriteString("]}")
	} else {
		b.WriteString(`,"session":{"id":"s","turn":2,"final":true}`)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// hintsConfig: prefill sends kv.fetch for every committed copy (large
// hints), decode kv.evict on a session's final turn (small ones).
func hintsConfig(tag int) string {
	return fmt.Sprintf(`
worker_selection:
  prefill:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv-fetch
        parameters: {min_blocks: 1}
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-evict
      - type: kv-retain
        parameters: {ttl_seconds: %d}
`, 60+tag)
}

// silentServer accepts TCP and never answers: a worker stuck before its
// TLS handshake, or before its HTTP answer. It counts its open
// connections and their peak.
type silentServer struct {
	ln                   net.Listener
	mu                   sync.Mutex
	open, peak, accepted int
}

func startSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	var conns sync.Map
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			s.mu.Lock()
			s.open++
			s.accepted++
			s.peak = max(s.peak, s.open)
			s.mu.Unlock()
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
				conns.Delete(c)
				s.mu.Lock()
				s.open--
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
	})
	return s
}

func (s *silentServer) counts() (open, peak, accepted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.peak, s.accepted
}

func (s *silentServer) addr() string { return s.ln.Addr().String() }

// startFaultManager is the manager binary as config/manager runs it,
// watching every namespace of env's control plane: no GOMEMLIMIT, the
// default budget, plus the flags of $KVHINT_FAULT_MANAGER_FLAGS. start
// starts it (again, after a Kill) and waits until it is ready, returning
// its pid; the process is killed when the test ends, its log's tail
// printed if the test failed.
func startFaultManager(t *testing.T, env *testenv.Env) (mgr *devenv.Process, start func() int) {
	t.Helper()
	probe, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"manager", "--kubeconfig", env.Kubeconfig, "--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probe)}
	if extra := os.Getenv("KVHINT_FAULT_MANAGER_FLAGS"); extra != "" {
		args = append(args, strings.Fields(extra)...)
		t.Logf("manager flags added: %s", extra)
	}
	mgr = devenv.NewProcess("manager", kvhint, args, []string{"GOMEMLIMIT=", "GOGC="}, env.Dir)
	t.Cleanup(func() {
		mgr.Kill()
		if t.Failed() {
			t.Logf("manager log ends:\n%s", mgr.Tail(4096))
		}
	})
	return mgr, func() int {
		t.Helper()
		if err := mgr.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := mgr.WaitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(probe)+"/readyz"); err != nil {
			t.Fatal(err)
		}
		return mgr.PID()
	}
}
