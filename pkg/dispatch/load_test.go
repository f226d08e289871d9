package dispatch

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestReloadStateAfterRevert: a bad document, then the document in force
// again (an operator reverting), then the same bad document again. The
// revert is a successful load: config_last_reload_successful goes back to
// 1. The second bad document is a new failure: counted and logged again.
// Before the fix a reload of the document in force returned early, so the
// gauge stayed 0 and the dedupe key still held the bad hash.
func TestReloadStateAfterRevert(t *testing.T) {
	const good = "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n"
	const bad = "worker_selection:\n  decode:\n    type: no-such-selection\n"
	var errLogs int
	log := funcr.New(func(prefix, args string) {}, funcr.Options{})
	log = logr.New(&countErrors{LogSink: log.GetSink(), n: &errLogs})
	m := newRecordedMetrics()
	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Metrics: m, Log: log})

	// failures counts the failed loads reported; ok is 1 when the last
	// load reported succeeded, as config_last_reload_successful.
	failures := func() float64 { return float64(m.loadsReported("failed")) }
	ok := func() float64 {
		if l := m.lastLoad(); strings.HasPrefix(l, "ok ") {
			return 1
		}
		return 0
	}

	if err := d.Load([]byte(good), "test"); err != nil {
		t.Fatal(err)
	}
	if err := d.Load([]byte(bad), "test"); !errors.Is(err, ErrConfigRejected) {
		t.Fatalf("bad document: %v, want ErrConfigRejected", err)
	}
	if failures() != 1 || ok() != 0 || errLogs != 1 {
		t.Fatalf("after the bad document: failures %v, last_reload_successful %v, error logs %d; want 1, 0, 1", failures(), ok(), errLogs)
	}
	// A poller rereading the same bad document is one failure, one log.
	d.Load([]byte(bad), "test")
	if failures() != 1 || errLogs != 1 {
		t.Fatalf("the same bad document reread: failures %v, error logs %d; want 1, 1", failures(), errLogs)
	}

	if err := d.Load([]byte(good), "test"); err != nil {
		t.Fatal(err)
	}
	if ok() != 1 {
		t.Errorf("after a revert to the config in force: config_last_reload_successful = %v, want 1", ok())
	}

	d.Load([]byte(bad), "test")
	if failures() != 2 || ok() != 0 || errLogs != 2 {
		t.Errorf("the bad document again after the revert: failures %v, last_reload_successful %v, error logs %d; want 2, 0, 2", failures(), ok(), errLogs)
	}

	// A source error, then the document in force read again: the same.
	d.Load([]byte(good), "test")
	d.RecordSourceError("test", errors.New("file vanished"))
	if ok() != 0 {
		t.Fatalf("after a source error: config_last_reload_successful = %v, want 0", ok())
	}
	d.Load([]byte(good), "test")
	if ok() != 1 {
		t.Errorf("the document in force back after a source error: config_last_reload_successful = %v, want 1", ok())
	}
}

// countErrors counts Error calls of a sink.
type countErrors struct {
	logr.LogSink
	n *int
}

func (c *countErrors) Error(err error, msg string, kv ...any) { *c.n++ }

// TestLoadRunsRolesUnderTheirModes: a policy file loaded alone runs every
// role under Options.RouterMode, as Dynamo's router runs it under its
// --router-mode; LoadConfig takes each role's mode and the hash the config
// is known by.
func TestLoadRunsRolesUnderTheirModes(t *testing.T) {
	const withHints = "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: [{type: kv-evict}]\n"
	rr := NewDispatcher(Options{Catalog: builtin.NewCatalog(), RouterMode: "round-robin"})
	err := rr.Load([]byte(withHints), "test")
	if !errors.Is(err, ErrConfigRejected) || !strings.Contains(err.Error(), `--router-mode is "round-robin"`) {
		t.Fatalf("hints under --router-mode round-robin: %v; want a rejection naming the flag", err)
	}

	d := NewDispatcher(Options{Catalog: builtin.NewCatalog(), Workers: StaticWorkers{"w": true}})
	two := "worker_selection:\n  decode: dynamo-default-cost-fn\n  prefill: dynamo-default-cost-fn\n"
	modes := hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeKV, "prefill": hintsconfig.ModeRandom}}
	if err := d.LoadConfig(Config{Doc: []byte(two), Modes: modes, Hash: "0123456789abcdef"}, "test"); err != nil {
		t.Fatal(err)
	}
	if got := d.ConfigHash(); got != "0123456789abcdef" {
		t.Errorf("hash %q; want the one the config came with", got)
	}
	final := hints.Session{ID: "s", Turn: 2, Final: true}
	for role, want := range map[string]Outcome{"decode": OutcomeHinted, "prefill": OutcomeNoActions} {
		h, err := d.Build(t.Context(), &Booking{RequestID: "r", Role: role, Worker: "w", PromptTokens: 16, BlockSize: 16, Session: final})
		if err != nil || h.Outcome != want {
			t.Errorf("role %s: outcome %v, %v; want %v (kv-evict runs by default on kv only)", role, h.Outcome, err, want)
		}
	}

	// No policy file: a router none of whose roles is accepted.
	if err := d.LoadConfig(Config{Hash: "fedcba9876543210"}, "test"); err != nil {
		t.Fatal(err)
	}
	if roles := d.Roles(); len(roles) != 0 || !d.Ready() {
		t.Errorf("roles %v, ready %v; want none, ready", roles, d.Ready())
	}
}
