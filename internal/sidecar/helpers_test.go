package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// policyRuns counts the runs of the test-count policy, to prove which
// policies ran.
var policyRuns atomic.Int64

// blockGate, when set, holds test-block: it signals entered, then waits
// for release.
type blockGate struct{ entered, release chan struct{} }

var blockPolicy atomic.Pointer[blockGate]

// testCatalog is the built-ins plus policies that misbehave on purpose.
func testCatalog(t testing.TB) *hints.Catalog {
	t.Helper()
	cat := builtin.NewCatalog()
	type tagParams struct {
		Tag string `json:"tag"`
	}
	type manyParams struct {
		Count int `json:"count"`
	}
	type malformedParams struct {
		Kind string `json:"kind"`
	}
	type slowParams struct {
		Sleep string `json:"sleep"`
	}
	static := func(tag string) hints.Action {
		w := hints.NewObjectWriter(nil)
		w.String("tag", tag)
		p, err := w.Payload()
		if err != nil {
			panic(err)
		}
		return hints.Action{Type: "test.static", Version: "1.0", Payload: p}
	}
	providers := []hints.HintProvider{
		{
			Type: "test-static", Description: "one test.static action carrying its tag",
			Parse: func(raw hints.Params) (hints.HintPolicy, error) {
				var p tagParams
				if err := hints.DecodeParams(raw, &p); err != nil {
					return nil, err
				}
				acts := []hints.Action{static(p.Tag)}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return acts, nil }), nil
			},
		},
		{
			Type: "test-panic", Description: "panics",
			Parse: func(hints.Params) (hints.HintPolicy, error) {
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) {
					panic("test-panic was asked to panic")
				}), nil
			},
		},
		{
			Type: "test-error", Description: "returns an action and an error",
			Parse: func(hints.Params) (hints.HintPolicy, error) {
				acts := []hints.Action{static("from-erring-policy")}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) {
					return acts, errors.New("test-error failed")
				}), nil
			},
		},
		{
			Type: "test-slow", Description: "returns an action after sleeping",
			Parse: func(raw hints.Params) (hints.HintPolicy, error) {
				p := slowParams{Sleep: "20ms"}
				if err := hints.DecodeParams(raw, &p); err != nil {
					return nil, err
				}
				d, err := time.ParseDuration(p.Sleep)
				if err != nil {
					return nil, hints.ParamErrorf("sleep", "%v", err)
				}
				acts := []hints.Action{static("from-slow-policy")}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) {
					time.Sleep(d)
					return acts, nil
				}), nil
			},
		},
		{
			Type: "test-malformed", Description: "returns a good action and a malformed one",
			Parse: func(raw hints.Params) (hints.HintPolicy, error) {
				var p malformedParams
				if err := hints.DecodeParams(raw, &p); err != nil {
					return nil, err
				}
				bad := static("bad")
				switch p.Kind {
				case "empty-type":
					bad.Type = ""
				case "bad-type":
					bad.Type = `kv"fetch`
				case "bad-version":
					bad.Version = "v1"
				case "bad-payload":
					bad.Payload = hints.RawPayload([]byte(`{"block_hashes":[1,`))
				case "array-payload":
					bad.Payload = hints.RawPayload([]byte(`[1,2]`))
				default:
					return nil, hints.ParamErrorf("kind", "unknown kind %q", p.Kind)
				}
				acts := []hints.Action{static("good-before-bad"), bad}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return acts, nil }), nil
			},
		},
		{
			Type: "test-many", Description: "returns count actions",
			Parse: func(raw hints.Params) (hints.HintPolicy, error) {
				p := manyParams{Count: 1}
				if err := hints.DecodeParams(raw, &p); err != nil {
					return nil, err
				}
				acts := make([]hints.Action, p.Count)
				for i := range acts {
					acts[i] = static(fmt.Sprint(i + 1))
				}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return acts, nil }), nil
			},
		},
		{
			Type: "test-count", Description: "counts its runs; returns one action",
			Parse: func(hints.Params) (hints.HintPolicy, error) {
				acts := []hints.Action{static("counted")}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) {
					policyRuns.Add(1)
					return acts, nil
				}), nil
			},
		},
		{
			Type: "test-block", Description: "waits on blockPolicy, then returns one action",
			Parse: func(raw hints.Params) (hints.HintPolicy, error) {
				var p tagParams
				if err := hints.DecodeParams(raw, &p); err != nil {
					return nil, err
				}
				acts := []hints.Action{static(p.Tag)}
				return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) {
					if g := blockPolicy.Load(); g != nil {
						g.entered <- struct{}{}
						<-g.release
					}
					return acts, nil
				}), nil
			},
		},
	}
	for _, p := range providers {
		if err := cat.RegisterHint(p); err != nil {
			t.Fatal(err)
		}
	}
	return cat
}

// startSidecar runs a standalone sidecar on loopback with the config file
// path (which may not exist yet), until the test ends.
func startSidecar(t *testing.T, cat *hints.Catalog, configFile string, tweak func(*Options)) *Sidecar {
	t.Helper()
	o := Options{
		Catalog: cat, ConfigFile: configFile, Poll: 50 * time.Millisecond,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: testLogger(t),
		// The simulated workers run on loopback.
		AllowLoopbackHintEndpoints: true,
	}
	if tweak != nil {
		tweak(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

// startSidecarWithConfig writes config to a temporary file and starts a
// sidecar on it, waiting until it is ready.
func startSidecarWithConfig(t *testing.T, cat *hints.Catalog, config string, tweak func(*Options)) *Sidecar {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hints.yaml")
	writeFile(t, path, config)
	s := startSidecar(t, cat, path, tweak)
	testenv.Eventually(t, 5*time.Second, "the sidecar ready", func(context.Context) error {
		if !s.Dispatcher.Ready() {
			return errors.New("sidecar not ready")
		}
		return nil
	})
	return s
}

// startWorker runs a simulated worker on loopback until the test ends.
func startWorker(t *testing.T, id string) *simworker.Server {
	t.Helper()
	srv, err := simworker.Start(simworker.New(simworker.Options{ID: id, WorkerType: "decode"}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// registerWorker registers a simulated worker through the sidecar's API, as
// `kvhint-dev sim-worker --register` does.
func registerWorker(t *testing.T, s *Sidecar, w *simworker.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := simworker.Register(ctx, "http://"+s.BookingAddr(), w.ID(), w.HintEndpoint(), "decode"); err != nil {
		t.Fatal(err)
	}
}

// response is an answer of the booking API.
type response struct {
	status int
	header http.Header
	body   string
}

// post sends body to the sidecar's booking API.
func post(t testing.TB, s *Sidecar, path, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.BookingAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return roundTrip(t, http.DefaultClient, req)
}

// roundTrip sends req with c and reads the whole answer.
func roundTrip(t testing.TB, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// bookingJSON builds a booking body.
func bookingJSON(reqID, role, worker string, extra string) string {
	s := fmt.Sprintf(`{"request_id":%q,"role":%q,"worker":%q,"prompt_tokens":4096,"block_size":64`, reqID, role, worker)
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// testLogger is sidecartest.Logger.
func testLogger(t testing.TB) logr.Logger { return sidecartest.Logger(t) }

// writeFile is sidecartest.WriteFile.
func writeFile(t testing.TB, path, data string) {
	t.Helper()
	sidecartest.WriteFile(t, path, data)
}

// gathered is sidecartest.Gathered.
func gathered(t testing.TB, g prometheus.Gatherer, metric string, want map[string]string) float64 {
	t.Helper()
	return sidecartest.Gathered(t, g, metric, want)
}

// sidecarCounters are the sidecar's counter vectors, for counter.
var sidecarCounters = map[string]sidecartest.Series{
	"failures":        {Metric: dispatchmetrics.Namespace + "_policy_failures_total", Labels: []string{"role", "policy", "policy_type", "reason"}},
	"dropped":         {Metric: dispatchmetrics.Namespace + "_actions_dropped_total", Labels: []string{"role", "policy", "policy_type", "reason"}},
	"actions":         {Metric: dispatchmetrics.Namespace + "_actions_total", Labels: []string{"role", "policy", "policy_type"}},
	"bookings":        {Metric: dispatchmetrics.Namespace + "_bookings_total", Labels: []string{"role", "outcome"}},
	"hints_dropped":   {Metric: dispatchmetrics.Namespace + "_hints_dropped_total", Labels: []string{"reason"}},
	"delivery_errors": {Metric: dispatchmetrics.Namespace + "_delivery_errors_total", Labels: []string{"reason"}},
	"reloads":         {Metric: dispatchmetrics.Namespace + "_config_reloads_total", Labels: []string{"result"}},
}

// counter reads one series of a counter vector from the sidecar's registry,
// as a scrape would: labels are given in the order the metric declares them.
func counter(t testing.TB, m prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	return sidecartest.Counter(t, m, sidecarCounters, name, labels...)
}
