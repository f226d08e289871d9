package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/configsource"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/workers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

func roleConfig(tag string) string {
	return fmt.Sprintf(`
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: test-static, parameters: {tag: %s}}
`, tag)
}

const invalidConfig = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: no-such-policy}
`

// decodeRoles is the roles.yaml of a compiled config whose one role,
// decode, runs on the KV path with no worker pool.
const decodeRoles = "decode:\n  routerMode: kv\n"

// compiledData is a compiled ConfigMap's data: doc as hints.yaml, roles as
// roles.yaml.
func compiledData(doc, roles string) map[string]string {
	return map[string]string{wellknown.HintsConfigKey: doc, wellknown.RolesKey: roles}
}

// compiledHashOf is the hash of a compiled config of doc, whose one role
// is decode under kv (decodeRoles).
func compiledHashOf(doc string) string { return compiled.Hash(compiledData(doc, decodeRoles)) }

// kubeletDir lays a directory out the way kubelet mounts a ConfigMap and
// swaps its content the way kubelet updates it: each version in a new
// timestamped directory, ..data a symlink to the current one, replaced by
// an atomic rename, and hints.yaml and roles.yaml symlinks through ..data.
type kubeletDir struct {
	t       *testing.T
	dir     string
	version int
	current string
}

// newKubeletDir mounts a compiled config of content (decode under kv).
func newKubeletDir(t *testing.T, content string) *kubeletDir {
	k := &kubeletDir{t: t, dir: t.TempDir()}
	k.swap(content)
	for _, key := range []string{wellknown.HintsConfigKey, wellknown.RolesKey} {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(k.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// swap publishes a compiled config of content, decode under kv, as
// kubelet's atomic writer does.
func (k *kubeletDir) swap(content string) { k.swapData(compiledData(content, decodeRoles)) }

// swapData publishes the data of a ConfigMap as kubelet's atomic writer
// does: a key absent from data is absent from the new version.
func (k *kubeletDir) swapData(data map[string]string) {
	k.t.Helper()
	k.version++
	ts := fmt.Sprintf("..2026_11_29_12_00_%02d.%09d", k.version, k.version)
	if err := os.Mkdir(filepath.Join(k.dir, ts), 0o755); err != nil {
		k.t.Fatal(err)
	}
	for key, v := range data {
		if err := os.WriteFile(filepath.Join(k.dir, ts, key), []byte(v), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		k.t.Fatal(err)
	}
	if k.current != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, k.current)); err != nil {
			k.t.Fatal(err)
		}
	}
	k.current = ts
}

func waitHash(t *testing.T, d *dispatch.Dispatcher, want string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the config hash applied", func(context.Context) error {
		if got := d.ConfigHash(); got != want {
			return fmt.Errorf("config hash %q, want %q", got, want)
		}
		return nil
	})
}

func hashOf(doc string) string { return hintsconfig.ContentHash([]byte(doc)) }

// TestDirSourceKubeletSwap reloads through real symlink swaps. The poll
// interval is an hour, so only the directory watch can see the changes.
// The hash in force is the compiled one, over hints.yaml and roles.yaml.
func TestDirSourceKubeletSwap(t *testing.T) {
	k := newKubeletDir(t, roleConfig("v1"))
	m := prometheus.NewRegistry()
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: testCatalog(t), Metrics: dispatchmetrics.New(m), Log: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); configsource.DirSource(k.dir, time.Hour).Run(ctx, d, testLogger(t)) }()
	t.Cleanup(func() { cancel(); <-done })

	waitHash(t, d, compiledHashOf(roleConfig("v1")))

	k.swap(roleConfig("v2"))
	waitHash(t, d, compiledHashOf(roleConfig("v2")))

	// An invalid version is refused: v2 stays in force, and the metrics say so.
	k.swap(invalidConfig)
	testenv.Eventually(t, 5*time.Second, "one failed reload", func(context.Context) error {
		if n := counter(t, m, "reloads", "failure"); n != 1 {
			return fmt.Errorf("failed reloads %v, want 1", n)
		}
		return nil
	})
	if got, want := d.ConfigHash(), compiledHashOf(roleConfig("v2")); got != want {
		t.Errorf("after an invalid swap the hash is %s, want the last good %s", got, want)
	}
	if v := gathered(t, m, "kvhint_router_config_last_reload_successful", nil); v != 0 {
		t.Errorf("config_last_reload_successful = %v after a failure, want 0", v)
	}
	if v := gathered(t, m, "kvhint_router_config_info", map[string]string{"hash": compiledHashOf(roleConfig("v2"))}); v != 1 {
		t.Errorf("config_info{hash=v2} = %v, want 1", v)
	}

	// The next good version is taken.
	k.swap(roleConfig("v3"))
	waitHash(t, d, compiledHashOf(roleConfig("v3")))
	if v := gathered(t, m, "kvhint_router_config_last_reload_successful", nil); v != 1 {
		t.Errorf("config_last_reload_successful = %v after a success, want 1", v)
	}
	if n := testutil.CollectAndCount(m, "kvhint_router_config_info"); n != 1 {
		t.Errorf("config_info has %d series, want only the hash in force", n)
	}
	if n := counter(t, m, "reloads", "success"); n != 3 {
		t.Errorf("successful reloads %v, want 3", n)
	}
}

// TestDirSourceRolesRefusedWhole: a mounted compiled ConfigMap whose
// roles.yaml is malformed, or does not name exactly the roles of its
// hints.yaml, is refused as a whole, however good its hints.yaml: the
// config in force and the worker pools stay, and each refusal is counted
// as a failed reload. A good version after them is taken, pools and all.
func TestDirSourceRolesRefusedWhole(t *testing.T) {
	pooled := func(component string) string {
		return "decode:\n  routerMode: kv\n  workerSelector:\n    matchLabels: {component: " + component + "}\n"
	}
	k := &kubeletDir{t: t, dir: t.TempDir()}
	k.swapData(compiledData(roleConfig("v1"), pooled("decode")))
	for _, key := range []string{wellknown.HintsConfigKey, wellknown.RolesKey} {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(k.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	m := prometheus.NewRegistry()
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: testCatalog(t), Metrics: dispatchmetrics.New(m), Log: testLogger(t)})
	var mu sync.Mutex
	var pools []map[string]labels.Selector
	src := configsource.DirSource(k.dir, time.Hour)
	src.OnWorkerSelectors = func(p map[string]labels.Selector) {
		mu.Lock()
		defer mu.Unlock()
		pools = append(pools, p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, d, testLogger(t)) }()
	t.Cleanup(func() { cancel(); <-done })

	lastPool := func() (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if len(pools) == 0 {
			return 0, ""
		}
		return len(pools), fmt.Sprint(pools[len(pools)-1])
	}
	good := compiledData(roleConfig("v1"), pooled("decode"))
	waitHash(t, d, compiled.Hash(good))
	// A load puts the pools in force in two steps (compiledLoader): the
	// transition's, then the config's.
	testenv.Eventually(t, 5*time.Second, "decode's pool update", func(context.Context) error {
		if n, p := lastPool(); n != 2 || p != "map[decode:component=decode]" {
			return fmt.Errorf("%d pool updates, last %s; want 2, decode's", n, p)
		}
		return nil
	})

	// Each bad version has a valid hints.yaml (v2) and a new selector, so
	// a half load would show in the hash or the pools.
	for i, bad := range []struct{ name, roles string }{
		{"roles.yaml not YAML", "decode: [routerMode: kv\n"},
		{"roles.yaml with an unknown key", "decode:\n  routerMode: kv\n  pool: decode-v2\n"},
		{"roles.yaml with no router mode", "decode:\n  workerSelector:\n    matchLabels: {component: decode-v2}\n"},
		{"roles.yaml with an invalid selector", "decode:\n  routerMode: kv\n  workerSelector:\n    matchExpressions: [{key: component, operator: Near}]\n"},
		{"roles.yaml names a role hints.yaml lacks", pooled("decode-v2") + "prefill:\n  routerMode: kv\n"},
		{"roles.yaml lacks a role of hints.yaml", "prefill:\n  routerMode: kv\n"},
		{"no roles.yaml", ""},
	} {
		data := compiledData(roleConfig("v2"), bad.roles)
		if bad.roles == "" {
			delete(data, wellknown.RolesKey)
		}
		k.swapData(data)
		testenv.Eventually(t, 5*time.Second, "the bad config's failed reload", func(context.Context) error {
			if n := counter(t, m, "reloads", "failure"); n != float64(i+1) {
				return fmt.Errorf("%s: failed reloads %v, want %d", bad.name, n, i+1)
			}
			return nil
		})
		if got, want := d.ConfigHash(), compiled.Hash(good); got != want {
			t.Errorf("%s: the hash in force is %s, want the last good %s", bad.name, got, want)
		}
		if v := gathered(t, m, "kvhint_router_config_last_reload_successful", nil); v != 0 {
			t.Errorf("%s: config_last_reload_successful = %v, want 0", bad.name, v)
		}
		if n, p := lastPool(); n != 2 || p != "map[decode:component=decode]" {
			t.Errorf("%s: %d pool updates, last %s; want the pools in force untouched", bad.name, n, p)
		}
	}
	if n := counter(t, m, "reloads", "success"); n != 1 {
		t.Errorf("successful reloads %v, want 1", n)
	}

	// A good version is taken whole: the config and its pools.
	next := compiledData(roleConfig("v3"), pooled("decode-v3"))
	k.swapData(next)
	waitHash(t, d, compiled.Hash(next))
	testenv.Eventually(t, 5*time.Second, "decode-v3's pool update", func(context.Context) error {
		if n, p := lastPool(); n != 4 || p != "map[decode:component=decode-v3]" {
			return fmt.Errorf("%d pool updates, last %s; want 4, decode-v3's", n, p)
		}
		// Between the swaps, decode admitted only workers in both its
		// old pool and its new one.
		mu.Lock()
		defer mu.Unlock()
		if p := fmt.Sprint(pools[2]); p != "map[decode:component=decode,component=decode-v3]" {
			return fmt.Errorf("the transition's pools are %s; want both of decode's selectors at once", p)
		}
		return nil
	})
	if v := gathered(t, m, "kvhint_router_config_last_reload_successful", nil); v != 1 {
		t.Errorf("config_last_reload_successful = %v after a good version, want 1", v)
	}
}

// TestFileSourcePollsWhenItCannotWatch starts on a directory that does not
// exist yet, so no watch can be set: the poll finds the file when it comes.
func TestFileSourcePollsWhenItCannotWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: testCatalog(t), Log: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		configsource.FileSource{Path: filepath.Join(dir, "hints.yaml"), Poll: 20 * time.Millisecond}.Run(ctx, d, testLogger(t))
	}()
	t.Cleanup(func() { cancel(); <-done })

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "hints.yaml"), roleConfig("late"))
	waitHash(t, d, hashOf(roleConfig("late")))
}

// TestReadiness: /readyz fails until the first valid config loads, an
// invalid first config keeps it failing, and a later invalid file keeps the
// last good config and readiness.
func TestReadiness(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hints.yaml")
	s := startSidecar(t, testCatalog(t), path, nil)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + s.OpsAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with no file: %d %s, want 503", code, body)
	}
	if resp := post(t, s, "/v1/bookings", bookingJSON("r", "decode", "w", "")); resp.status != http.StatusServiceUnavailable {
		t.Errorf("booking before any config: %d, want 503", resp.status)
	}

	writeFile(t, path, invalidConfig)
	testenv.Eventually(t, 5*time.Second, "the invalid file refused", func(context.Context) error {
		if n := counter(t, s.Metrics, "reloads", "failure"); n < 1 {
			return errors.New("the invalid file was not read yet")
		}
		return nil
	})
	if code, _ := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with only an invalid config: %d, want 503", code)
	}

	writeFile(t, path, roleConfig("good"))
	testenv.Eventually(t, 5*time.Second, "readyz 200", func(context.Context) error {
		if code, body := readyz(); code != http.StatusOK {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})

	before := counter(t, s.Metrics, "reloads", "failure")
	writeFile(t, path, "worker_selection: [not, a, mapping]\n")
	testenv.Eventually(t, 5*time.Second, "the broken file refused", func(context.Context) error {
		if n := counter(t, s.Metrics, "reloads", "failure"); n <= before {
			return errors.New("the broken file was not read yet")
		}
		return nil
	})
	if code, _ := readyz(); code != http.StatusOK {
		t.Errorf("readyz after a broken reload: %d, want 200 on the last good config", code)
	}
	if got, want := s.Dispatcher.ConfigHash(), hashOf(roleConfig("good")); got != want {
		t.Errorf("hash %s after a broken reload, want the last good %s", got, want)
	}
}

// TestInFlightBookingKeepsItsSnapshot reloads while a booking is inside a
// policy: the booking finishes on the config it began with, the next one
// runs the new config.
func TestInFlightBookingKeepsItsSnapshot(t *testing.T) {
	cat := testCatalog(t)
	reg := workers.NewRegistry(nil)
	if err := reg.Set(workers.SourceAPI, workers.WorkerSpec{ID: "w", Capabilities: []string{dispatch.CapabilityRouterHint}}); err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: cat, Workers: reg, PolicyDeadline: time.Minute, Log: testLogger(t)})
	oldDoc := "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: [{type: test-block, parameters: {tag: old}}]\n"
	if err := d.Load([]byte(oldDoc), "test"); err != nil {
		t.Fatal(err)
	}
	gate := &blockGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	blockPolicy.Store(gate)
	t.Cleanup(func() { blockPolicy.Store(nil) })

	type result struct {
		h   dispatch.Hint
		err error
	}
	inFlight := make(chan result)
	go func() {
		h, err := d.Book(context.Background(), &dispatch.Booking{RequestID: "r-old", Role: "decode", Worker: "w"})
		inFlight <- result{h, err}
	}()
	// Reload only once the booking is inside its policy.
	select {
	case <-gate.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the booking never reached its policy")
	}
	if err := d.Load([]byte(roleConfig("new")), "test"); err != nil {
		t.Fatal(err)
	}
	blockPolicy.Store(nil)
	close(gate.release)
	r := <-inFlight
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := hashOf(oldDoc); r.h.ConfigHash != want {
		t.Errorf("in-flight booking ran on %s, want the snapshot it began with, %s", r.h.ConfigHash, want)
	}
	if want := message("r-old", staticJSON(1, "old")); string(r.h.Message) != want {
		t.Errorf("in-flight booking built %s, want %s", r.h.Message, want)
	}
	h, err := d.Book(context.Background(), &dispatch.Booking{RequestID: "r-new", Role: "decode", Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if want := message("r-new", staticJSON(1, "new")); string(h.Message) != want {
		t.Errorf("next booking built %s, want %s", h.Message, want)
	}
}

// TestDirSourceRouterModes: a mounted compiled ConfigMap's roles.yaml
// says which router mode each role runs under. Hints under a mode other
// than kv are refused, the whole config with them; a role under
// round-robin runs no hints, where the same entry under kv runs kvcr's
// defaults, and a change of mode alone is a new config.
func TestDirSourceRouterModes(t *testing.T) {
	const static = "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: test-static, parameters: {tag: rr}}]}\n"
	const defaults = "worker_selection:\n  decode: {type: kvcr}\n"
	const roundRobin = "decode:\n  routerMode: round-robin\n"
	k := &kubeletDir{t: t, dir: t.TempDir()}
	k.swapData(compiledData(static, roundRobin))
	for _, key := range []string{wellknown.HintsConfigKey, wellknown.RolesKey} {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(k.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	s := startSidecar(t, testCatalog(t), "", func(o *Options) { o.ConfigFile, o.ConfigDir = "", k.dir })
	w := startWorker(t, "worker-0")
	registerWorker(t, s, w)

	// Hints under round-robin: refused, and nothing is in force.
	testenv.Eventually(t, 5*time.Second, "one failed reload", func(context.Context) error {
		if n := counter(t, s.Metrics, "reloads", "failure"); n != 1 {
			return fmt.Errorf("failed reloads %v, want 1", n)
		}
		return nil
	})
	if s.Dispatcher.Ready() {
		t.Errorf("ready on a config whose decode role has hints under round-robin")
	}

	// kvcr's entry without hints, under round-robin: loaded, and no hint runs.
	rr := compiledData(defaults, roundRobin)
	k.swapData(rr)
	waitHash(t, s.Dispatcher, compiled.Hash(rr))
	withCopy := copyJSON("worker-1", "tcp://10.0.0.7:23280", []uint64{1, 2, 3})
	if resp := post(t, s, "/v1/bookings", bookingJSON("r-rr", "decode", "worker-0", withCopy)); resp.status != http.StatusNoContent || resp.header.Get(booking.HeaderOutcome) != "no_actions" {
		t.Errorf("decode under round-robin: %d %q, want 204 no_actions", resp.status, resp.header.Get(booking.HeaderOutcome))
	}

	// The same hints.yaml under kv: a new config (the hash covers the
	// modes), and kvcr's default kv-fetch runs.
	kv := compiledData(defaults, decodeRoles)
	if compiled.Hash(kv) == compiled.Hash(rr) {
		t.Fatalf("the hash does not cover roles.yaml")
	}
	k.swapData(kv)
	waitHash(t, s.Dispatcher, compiled.Hash(kv))
	if resp := post(t, s, "/v1/bookings", bookingJSON("r-kv", "decode", "worker-0", withCopy)); resp.status != http.StatusOK || !strings.Contains(resp.body, `"kv.fetch"`) {
		t.Errorf("decode under kv: %d %s, want 200 with a kv.fetch", resp.status, resp.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := w.WaitForHints(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].MessageID != "r-kv" {
		t.Errorf("worker-0 received %d hints (first %q), want only r-kv's", len(got), got[0].MessageID)
	}
}

// TestNoRoleConfigIsReady: while no role of a router is accepted, its
// compiled ConfigMap holds roles.yaml alone and no hints.yaml. A sidecar
// on it runs no role and is ready, and GET /v1/config answers the empty
// policy file with the config's hash (it answered 503, reading "no policy
// file" as "not loaded").
func TestNoRoleConfigIsReady(t *testing.T) {
	k := &kubeletDir{t: t, dir: t.TempDir()}
	data := map[string]string{wellknown.RolesKey: "{}\n"}
	k.swapData(data)
	if err := os.Symlink(filepath.Join("..data", wellknown.RolesKey), filepath.Join(k.dir, wellknown.RolesKey)); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, testCatalog(t), "", func(o *Options) { o.ConfigDir = k.dir })
	waitHash(t, s.Dispatcher, compiled.Hash(data))
	resp, err := http.Get("http://" + s.OpsAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d, want 200", resp.StatusCode)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+s.BookingAddr()+"/v1/config", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := roundTrip(t, http.DefaultClient, req)
	if r.status != http.StatusOK || r.body != "" || r.header.Get(booking.HeaderConfigHash) != compiled.Hash(data) {
		t.Errorf("GET /v1/config: %d %q, hash %q; want 200, an empty body and %s", r.status, r.body, r.header.Get(booking.HeaderConfigHash), compiled.Hash(data))
	}
	if roles := s.Dispatcher.Roles(); len(roles) != 0 {
		t.Errorf("roles %v; want none", roles)
	}
}
