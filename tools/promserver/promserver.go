package promserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// Build builds bin/prometheus from this module's pinned Prometheus, once
// per test process, and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		bin, err := filepath.Abs(filepath.Join("bin", "prometheus"))
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-tags", "remove_all_sd", "-o", bin, "github.com/prometheus/prometheus/cmd/prometheus")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building prometheus: %v\n%s", err, out)
			return
		}
		built = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// Target is a static scrape target and the labels it gets.
type Target struct {
	// Address is host:port of a /metrics endpoint.
	Address string
	// Labels are added to every series scraped from it.
	Labels map[string]string
}

// Server is a running Prometheus.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string
}

// Start runs the server at bin on a free loopback port, scraping targets
// every scrapeInterval, with its data in a temporary folder; it is
// stopped when the test ends. Start returns once the server is ready.
func Start(t testing.TB, bin string, scrapeInterval time.Duration, targets []Target) *Server {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n", scrapeInterval, scrapeInterval)
	for i, tg := range targets {
		fmt.Fprintf(&cfg, "- job_name: target-%d\n  static_configs:\n  - targets: [%q]\n    labels:\n", i, tg.Address)
		for k, v := range tg.Labels {
			fmt.Fprintf(&cfg, "      %s: %q\n", k, v)
		}
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &syncWriter{w: &logs}, &syncWriter{w: &logs}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting prometheus: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	s := &Server{URL: "http://" + addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready after 60s (%v); config:\n%s", addr, err, cfg.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort is a loopback address no one listens on now.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// WaitFor polls the instant query expr until its one sample's value is
// want, for at most timeout: a way to know a scrape has taken values in
// without guessing how long scrapes take on a loaded machine.
func (s *Server) WaitFor(t testing.TB, expr string, want float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		v, err := s.value(expr)
		if err == nil && v == want {
			return
		}
		last = fmt.Sprintf("%v (%v)", v, err)
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s after %v, want %v", expr, last, timeout, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Server) value(expr string) (float64, error) {
	resp, err := http.Get(s.URL + "/api/v1/query?" + url.Values{"query": {expr}}.Encode())
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var a struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return 0, err
	}
	if len(a.Data.Result) != 1 {
		return 0, fmt.Errorf("%d samples", len(a.Data.Result))
	}
	str, _ := a.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(str, 64)
}
