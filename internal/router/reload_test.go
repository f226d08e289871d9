package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// kubeletDir lays a directory out the way kubelet mounts a ConfigMap and
// swaps its content the way kubelet updates it: each version in a new
// timestamped directory, ..data a symlink to the current one, replaced by
// an atomic rename, and hints.yaml a symlink through ..data.
type kubeletDir struct {
	t       *testing.T
	dir     string
	version int
	current string
}

func newKubeletDir(t *testing.T, content string) *kubeletDir {
	k := &kubeletDir{t: t, dir: t.TempDir()}
	k.swap(content)
	if err := os.Symlink(filepath.Join("..data", ConfigMapKey), filepath.Join(k.dir, ConfigMapKey)); err != nil {
		t.Fatal(err)
	}
	return k
}

// swap publishes content as kubelet's atomic writer does.
func (k *kubeletDir) swap(content string) {
	k.t.Helper()
	k.version++
	ts := fmt.Sprintf("..2026_11_29_12_00_%02d.%09d", k.version, k.version)
	if err := os.Mkdir(filepath.Join(k.dir, ts), 0o755); err != nil {
		k.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(k.dir, ts, ConfigMapKey), []byte(content), 0o644); err != nil {
		k.t.Fatal(err)
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

func waitHash(t *testing.T, d *core.Dispatcher, want string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if got := d.ConfigHash(); got != want {
			return fmt.Errorf("config hash %q, want %q", got, want)
		}
		return nil
	})
}

func hashOf(doc string) string { return hintsconfig.ContentHash([]byte(doc)) }

// TestDirSourceKubeletSwap reloads through real symlink swaps. The poll
// interval is an hour, so only the directory watch can see the changes.
func TestDirSourceKubeletSwap(t *testing.T) {
	k := newKubeletDir(t, roleConfig("v1"))
	m := NewMetrics()
	d := core.NewDispatcher(core.Options{Catalog: testCatalog(t), Metrics: m.Dispatch, Log: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); DirSource(k.dir, time.Hour).Run(ctx, d, testLogger(t)) }()
	t.Cleanup(func() { cancel(); <-done })

	waitHash(t, d, hashOf(roleConfig("v1")))

	k.swap(roleConfig("v2"))
	waitHash(t, d, hashOf(roleConfig("v2")))

	// An invalid version is refused: v2 stays in force, and the metrics say so.
	k.swap(invalidConfig)
	eventually(t, 5*time.Second, func() error {
		if n := counter(t, m, "reloads", "failure"); n != 1 {
			return fmt.Errorf("failed reloads %v, want 1", n)
		}
		return nil
	})
	if got, want := d.ConfigHash(), hashOf(roleConfig("v2")); got != want {
		t.Errorf("after an invalid swap the hash is %s, want the last good %s", got, want)
	}
	if v := gathered(t, m.Registry, "kvhint_router_config_last_reload_successful", nil); v != 0 {
		t.Errorf("config_last_reload_successful = %v after a failure, want 0", v)
	}
	if v := gathered(t, m.Registry, "kvhint_router_config_info", map[string]string{"hash": hashOf(roleConfig("v2"))}); v != 1 {
		t.Errorf("config_info{hash=v2} = %v, want 1", v)
	}

	// The next good version is taken.
	k.swap(roleConfig("v3"))
	waitHash(t, d, hashOf(roleConfig("v3")))
	if v := gathered(t, m.Registry, "kvhint_router_config_last_reload_successful", nil); v != 1 {
		t.Errorf("config_last_reload_successful = %v after a success, want 1", v)
	}
	if n := testutil.CollectAndCount(m.Registry, "kvhint_router_config_info"); n != 1 {
		t.Errorf("config_info has %d series, want only the hash in force", n)
	}
	if n := counter(t, m, "reloads", "success"); n != 3 {
		t.Errorf("successful reloads %v, want 3", n)
	}
}

// TestFileSourcePollsWhenItCannotWatch starts on a directory that does not
// exist yet, so no watch can be set: the poll finds the file when it comes.
func TestFileSourcePollsWhenItCannotWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	d := core.NewDispatcher(core.Options{Catalog: testCatalog(t), Log: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		FileSource{Path: filepath.Join(dir, "hints.yaml"), Poll: 20 * time.Millisecond}.Run(ctx, d, testLogger(t))
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
	eventually(t, 5*time.Second, func() error {
		if n := counter(t, s.Metrics, "reloads", "failure"); n < 1 {
			return errors.New("the invalid file was not read yet")
		}
		return nil
	})
	if code, _ := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with only an invalid config: %d, want 503", code)
	}

	writeFile(t, path, roleConfig("good"))
	eventually(t, 5*time.Second, func() error {
		if code, body := readyz(); code != http.StatusOK {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})

	before := counter(t, s.Metrics, "reloads", "failure")
	writeFile(t, path, "worker_selection: [not, a, mapping]\n")
	eventually(t, 5*time.Second, func() error {
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
	reg := NewRegistry(nil)
	if err := reg.Set(SourceAPI, WorkerSpec{ID: "w", Capabilities: []string{CapabilityRouterHint}}); err != nil {
		t.Fatal(err)
	}
	d := core.NewDispatcher(core.Options{Catalog: cat, Workers: reg, PolicyDeadline: time.Minute, Log: testLogger(t)})
	oldDoc := "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: [{type: test-block, parameters: {tag: old}}]\n"
	if err := d.Load([]byte(oldDoc), "test"); err != nil {
		t.Fatal(err)
	}
	gate := &blockGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	blockPolicy.Store(gate)
	t.Cleanup(func() { blockPolicy.Store(nil) })

	type result struct {
		h   core.Hint
		err error
	}
	inFlight := make(chan result)
	go func() {
		h, err := d.Book(context.Background(), &core.Booking{RequestID: "r-old", Role: "decode", Worker: "w"})
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
	h, err := d.Book(context.Background(), &core.Booking{RequestID: "r-new", Role: "decode", Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if want := message("r-new", staticJSON(1, "new")); string(h.Message) != want {
		t.Errorf("next booking built %s, want %s", h.Message, want)
	}
}
