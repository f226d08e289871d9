package fault

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// The admin surface, the hint endpoints and the config's pools, attacked
// as the hardening issue's report did, against the real binary. Every
// address that would leave the machine is only ever registered (and
// refused), never dialled.

// answer is one HTTP answer, read whole.
type answer struct {
	code int
	body string
}

// do sends one request with an optional JSON body.
func do(t *testing.T, method, url, body string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

// errText is the error an answer's JSON body carries, or its body.
func (a answer) errText() string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(a.body), &e) == nil && e.Error != "" {
		return e.Error
	}
	return a.body
}

// listed returns the workers the sidecar lists, by ID, with their source.
func listed(t *testing.T, s *sidecar) map[string]string {
	t.Helper()
	a := do(t, http.MethodGet, s.booking+"/v1/workers", "")
	var l struct {
		Workers []struct {
			ID     string `json:"id"`
			Source string `json:"source"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(a.body), &l); err != nil {
		t.Fatalf("GET /v1/workers: %d %s: %v", a.code, a.body, err)
	}
	out := map[string]string{}
	for _, w := range l.Workers {
		out[w.ID] = w.Source
	}
	return out
}

// TestAdminSurfaceClosed: worker IDs that are not valid UTF-8 or hold
// control characters, bidirectional marks or too many bytes are a 400
// naming the problem (the report: %FF was a 500 from a recovered panic,
// NUL, newlines and RTL marks were accepted); a registration over the API
// never replaces, and a DELETE never removes, the workers file's worker
// of the same ID.
func TestAdminSurfaceClosed(t *testing.T) {
	s := startSidecar(t, sidecarOpts{strict: true, config: hintsConfig(0),
		// Not hint-capable: nothing is ever sent to it.
		workers: "workers:\n  - {id: filew, hint_endpoint: 'http://10.0.0.5:9/v1/hints'}\n"})
	for _, tc := range []struct{ path, why string }{
		{"%FF", "not valid UTF-8"},
		{"a%C0%AFb", "not valid UTF-8"},
		{"a%00b", `'\x00'`},
		{"a%0Ab", `'\n'`},
		{"a%E2%80%8Fb", `'\u200f'`}, // RIGHT-TO-LEFT MARK
		{"a%20b", `' '`},
		{"-a", "start and end"},
		{strings.Repeat("x", 254), "over the 253"},
	} {
		a := do(t, http.MethodPut, s.booking+"/v1/workers/"+tc.path, `{}`)
		if a.code != http.StatusBadRequest || !strings.Contains(a.errText(), tc.why) {
			t.Errorf("PUT /v1/workers/%.20s: %d %s, want 400 saying %s", tc.path, a.code, a.body, tc.why)
		}
		if a := do(t, http.MethodDelete, s.booking+"/v1/workers/"+tc.path, ""); a.code != http.StatusBadRequest {
			t.Errorf("DELETE /v1/workers/%.20s: %d %s, want 400", tc.path, a.code, a.body)
		}
	}

	// The file's worker cannot be taken over or removed over the API.
	a := do(t, http.MethodPut, s.booking+"/v1/workers/filew", `{"capabilities":["router_hint"],"hint_endpoint":"http://10.0.0.6:9/v1/hints"}`)
	if a.code != http.StatusConflict || !strings.Contains(a.body, "another source (file)") {
		t.Errorf("PUT of the file's worker: %d %s, want 409 naming the file", a.code, a.body)
	}
	if a := do(t, http.MethodDelete, s.booking+"/v1/workers/filew", ""); a.code != http.StatusConflict {
		t.Errorf("DELETE of the file's worker: %d %s, want 409", a.code, a.body)
	}
	if got := listed(t, s); got["filew"] != "file" {
		t.Errorf("after the attempts the workers are %v, want filew from the file", got)
	}
	if n := scrape(t, s.ops)[`kvhint_router_workers_refused_total{source="api"}`]; n < 1 {
		t.Errorf("the PUT over the file's worker was not counted as refused: %v", n)
	}
	// What the API registered, the API may remove.
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/api-0.x_y", `{"hint_endpoint":"http://10.0.0.7:9/v1/hints"}`); a.code != http.StatusOK {
		t.Fatalf("PUT of a valid worker: %d %s", a.code, a.body)
	}
	if a := do(t, http.MethodDelete, s.booking+"/v1/workers/api-0.x_y", ""); a.code != http.StatusNoContent {
		t.Errorf("DELETE of the API's worker: %d %s, want 204", a.code, a.body)
	}
	got := listed(t, s)
	t.Logf("workers after the attack: %v", got)
	if len(got) != 1 {
		t.Errorf("workers %v, want filew alone", got)
	}
}

// TestEndpointsOffTheRouterPod: every spelling of the router pod itself,
// of cloud metadata, and every non-canonical numeric host is refused at
// registration with a 400 that says why, in a sidecar that runs as in a
// real deployment (no --allow-loopback-hint-endpoints). With the
// development flag loopback passes, but the sidecar's own listeners stay
// refused.
func TestEndpointsOffTheRouterPod(t *testing.T) {
	strict := startSidecar(t, sidecarOpts{strict: true, config: hintsConfig(0), workers: "workers:\n"})
	own := strings.TrimPrefix(strict.booking, "http://")
	for _, tc := range []struct{ ep, why string }{
		{"http://127.0.0.1:15000/quitquitquit", "loopback"},
		{"http://127.0.0.2:15000/quitquitquit", "loopback"},
		{"http://[::1]:15000/quitquitquit", "loopback"},
		{"http://[::ffff:127.0.0.1]:15000/quitquitquit", "loopback"},
		{"http://localhost:15000/quitquitquit", "localhost"},
		{"http://2130706433:15000/quitquitquit", "numeric host"},
		{"http://0177.0.0.1:15000/quitquitquit", "numeric host"},
		{"http://127.1:15000/quitquitquit", "numeric host"},
		{"http://0x7f.1:15000/quitquitquit", "numeric host"},
		{"http://[64:ff9b::a9fe:a9fe]/latest/meta-data", "169.254.169.254"},
		{"http://[64:ff9b::7f00:1]:15000/", "loopback"},
		{"http://192.0.0.192/opc/v2/instance/", "192.0.0.0/24"},
		{"http://100.100.100.200/latest/meta-data", "metadata"},
		{"http://[fd00:ec2::254]/latest/meta-data", "metadata"},
		{"http://169.254.169.254/latest/meta-data", "link-local"},
		{"http://0.0.0.0:15000/", "unspecified"},
		{"http://224.0.0.1:15000/", "multicast"},
		{"http://" + own + "/v1/workers/evil", "own listener"},
	} {
		a := do(t, http.MethodPut, strict.booking+"/v1/workers/w", fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, tc.ep))
		if a.code != http.StatusBadRequest || !strings.Contains(a.errText(), tc.why) {
			t.Errorf("PUT with %s: %d %s, want 400 saying %s", tc.ep, a.code, a.body, tc.why)
		}
	}
	// The workers file is held to the same rules, and named entry by entry.
	writeFile(t, filepath.Join(strict.dir, "workers.yaml"), "workers:\n"+workerLine("f0", "http://10.0.0.5:9/v1/hints")+workerLine("f1", "http://localhost:15000/quitquitquit")+workerLine("f2", "http://[64:ff9b::a9fe:a9fe]/"))
	testenv.Eventually(t, 10*time.Second, "the bad workers file named", func(context.Context) error {
		log := strict.proc.Tail(16384)
		for _, want := range []string{"workers[1]: worker f1", "workers[2]: worker f2"} {
			if !strings.Contains(log, want) {
				return fmt.Errorf("the log does not say %q", want)
			}
		}
		return nil
	})
	if got := listed(t, strict); len(got) != 0 {
		t.Errorf("a workers file with bad entries registered %v", got)
	}
	m := scrape(t, strict.ops)
	t.Logf("refused registrations: %v", sum(m, "kvhint_router_workers_refused_total"))

	dev := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n"})
	w := startWorker(t, "d0")
	if a := do(t, http.MethodPut, dev.booking+"/v1/workers/d0", fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, w.HintEndpoint())); a.code != http.StatusOK {
		t.Errorf("development sidecar: PUT of a loopback worker: %d %s", a.code, a.body)
	}
	for _, ep := range []string{dev.booking + "/v1/workers/evil", dev.ops + "/metrics", strings.Replace(dev.booking, "127.0.0.1", "localhost", 1) + "/v1/workers/evil"} {
		a := do(t, http.MethodPut, dev.booking+"/v1/workers/evil", fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, ep))
		if a.code != http.StatusBadRequest || !strings.Contains(a.body, "own listener") {
			t.Errorf("development sidecar: PUT with its own %s: %d %s, want 400", ep, a.code, a.body)
		}
	}
}

// TestListenRefusesAnyAddress: a booking listener on every interface, or
// on an address other than loopback, is refused at start unless the flag
// that names the risk is given. The check runs before any socket opens.
func TestListenRefusesAnyAddress(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hints.yaml")
	writeFile(t, cfg, hintsConfig(0))
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "10.0.0.5:0", "localhost:0"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, kvhint, "sidecar", "--config-file", cfg, "--listen", addr, "--metrics-listen", "127.0.0.1:0").CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "--listen-insecure-any-address") {
			t.Errorf("--listen %s: %v\n%s\nwant a refusal naming --listen-insecure-any-address", addr, err, out)
		}
	}
	help, _ := exec.Command(kvhint, "sidecar", "--help").CombinedOutput()
	for _, flag := range []string{"--listen-insecure-any-address", "--allow-loopback-hint-endpoints"} {
		if !strings.Contains(string(help), flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
}

// TestWorkersFileBadEntryNotReady: a sidecar that starts with a workers
// file holding a bad entry has no workers, so it is not ready, and its
// /readyz and log name every bad entry (the report: 0 workers and /readyz
// ok). A good file makes it ready; a bad one after that keeps the last
// good set.
func TestWorkersFileBadEntryNotReady(t *testing.T) {
	w := startWorker(t, "d0")
	bad := "workers:\n" + workerLine("d0", w.HintEndpoint()) +
		"  - {id: d1, worker_type: banana}\n" +
		"  - {id: 'd 2'}\n"
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: bad, noWait: true})
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		a := do(t, http.MethodGet, s.ops+"/readyz", "")
		if a.code == http.StatusOK {
			t.Fatalf("/readyz %d %q with a bad workers file and no workers", a.code, a.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a := do(t, http.MethodGet, s.ops+"/readyz", "")
	for _, want := range []string{"workers[1]: worker d1: worker_type \"banana\"", "workers[2]: worker id \"d 2\""} {
		if !strings.Contains(a.body, want) {
			t.Errorf("/readyz %d %q does not name %s", a.code, a.body, want)
		}
		if !strings.Contains(s.proc.Tail(16384), strings.ReplaceAll(want, `"`, `\"`)) {
			t.Errorf("the log does not name %s", want)
		}
	}
	t.Logf("/readyz with a bad workers file: %d %s", a.code, strings.TrimSpace(a.body))

	writeFile(t, filepath.Join(s.dir, "workers.yaml"), "workers:\n"+workerLine("d0", w.HintEndpoint()))
	testenv.Eventually(t, 10*time.Second, "ready once a good file loads", func(context.Context) error {
		if a := do(t, http.MethodGet, s.ops+"/readyz", ""); a.code != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", a.code, a.body)
		}
		return nil
	})
	writeFile(t, filepath.Join(s.dir, "workers.yaml"), bad)
	testenv.Eventually(t, 10*time.Second, "the second bad file refused", func(context.Context) error {
		if !strings.Contains(s.proc.Tail(16384), "keeping the workers it gave before") {
			return fmt.Errorf("not logged yet")
		}
		return nil
	})
	if got := listed(t, s); len(got) != 1 || got["d0"] != "file" {
		t.Errorf("after a bad file the workers are %v, want d0 kept", got)
	}
	if a := do(t, http.MethodGet, s.ops+"/readyz", ""); a.code != http.StatusOK {
		t.Errorf("/readyz %d after a bad file replaced a good one; the last good set is in force", a.code)
	}
}

// kubeletDir is a mounted ConfigMap as kubelet lays it out: the keys are
// links into ..data, which links to a timestamped directory swapped whole.
type kubeletDir struct {
	dir string
	n   int
}

func (k *kubeletDir) swap(t *testing.T, data map[string]string) {
	t.Helper()
	k.n++
	ts := fmt.Sprintf("..%d", k.n)
	if err := os.Mkdir(filepath.Join(k.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, v := range data {
		if err := os.WriteFile(filepath.Join(k.dir, ts, key), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(k.dir, key)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", key), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestConfigAndPoolsOneUnit: a compiled config and its pools swap
// together or not at all. A refused hints.yaml does not bring in the
// roles.yaml beside it (the report: old hints, new pools), a selector that
// does not parse is a failed reload, counted, and the last good config and
// pools stay.
func TestConfigAndPoolsOneUnit(t *testing.T) {
	w := startWorker(t, "wa")
	roles := func(sel string) string {
		return "decode: {routerMode: kv, workerSelector: " + sel + "}\nprefill: {routerMode: kv}\n"
	}
	k := &kubeletDir{dir: t.TempDir()}
	k.swap(t, map[string]string{compiled.PolicyKey: hintsConfig(0), compiled.RolesKey: roles("{matchLabels: {pool: a}}")})
	workers := "workers:\n" +
		fmt.Sprintf("  - {id: wa, capabilities: [router_hint], hint_endpoint: '%s', labels: {pool: a}}\n", w.HintEndpoint()) +
		fmt.Sprintf("  - {id: wb, capabilities: [router_hint], hint_endpoint: '%s', labels: {pool: b}}\n", w.HintEndpoint())
	s := startSidecar(t, sidecarOpts{configDir: k.dir, workers: workers})
	r := newRouter(s, 1)
	hinted := func(worker string) int {
		t.Helper()
		code, _, err := r.book(bookingBody("b-"+worker, "decode", worker, 0))
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	check := func(when string) {
		t.Helper()
		if a, b := hinted("wa"), hinted("wb"); a != http.StatusOK || b != http.StatusNoContent {
			t.Errorf("%s: booking wa %d, wb %d; want 200 (in pool a) and 204 (not in it)", when, a, b)
		}
	}
	check("at start")
	hash := do(t, http.MethodGet, s.booking+"/v1/config", "")
	failures := func() float64 { return scrape(t, s.ops)[`kvhint_router_config_reloads_total{result="failure"}`] }
	before := failures()

	// A policy file the sidecar refuses, with a roles.yaml that moves the
	// pool to b: neither applies.
	k.swap(t, map[string]string{compiled.PolicyKey: strings.Replace(hintsConfig(0), "kv-evict", "no-such-policy", 1), compiled.RolesKey: roles("{matchLabels: {pool: b}}")})
	testenv.Eventually(t, 10*time.Second, "the refused policy file counted", func(context.Context) error {
		if f := failures(); f <= before {
			return fmt.Errorf("kvhint_router_config_reloads_total{result=failure} %v", f)
		}
		return nil
	})
	check("after a refused hints.yaml with new pools")

	// A selector that does not parse: a failed reload, counted.
	before = failures()
	k.swap(t, map[string]string{compiled.PolicyKey: hintsConfig(1), compiled.RolesKey: roles("{matchExpressions: [{key: pool, operator: Bogus, values: [b]}]}")})
	testenv.Eventually(t, 10*time.Second, "the bad selector counted", func(context.Context) error {
		if f := failures(); f <= before {
			return fmt.Errorf("kvhint_router_config_reloads_total{result=failure} %v", f)
		}
		return nil
	})
	check("after a bad selector")
	if now := do(t, http.MethodGet, s.booking+"/v1/config", ""); now.body != hash.body {
		t.Errorf("the config in force changed after two refused reloads")
	}
	t.Logf("config_reloads_total{result=failure} = %v after two refused reloads", failures())
}
