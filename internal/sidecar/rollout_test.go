package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// The configs of a staged rollout: the stable one fetches the booking's
// committed copy and retains the session's blocks; the candidate drops
// kv-fetch; the broken one names a policy type the catalog lacks.
const (
	fetchConfig = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-fetch
      - type: kv-retain
        parameters: {ttl_seconds: 600}
`
	noFetchConfig = `
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: kv-retain
        parameters: {ttl_seconds: 600}
`
)

// stagedData is a compiled ConfigMap's data that runs stable and stages
// candidate (both decode under kv) as st says, st.Candidate filled in.
func stagedData(t testing.TB, stable, candidate string, st rolloutapi.Stage) map[string]string {
	t.Helper()
	st.Candidate = compiledHashOf(candidate)
	data, err := compiled.StagedData(compiledData(stable, decodeRoles), compiledData(candidate, decodeRoles), st)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// stagedBooking is turn turn of session, with a committed copy when
// withCopy.
func stagedBooking(id, session string, turn int, withCopy bool) string {
	extra := fmt.Sprintf(`"session":{"id":%q,"turn":%d}`, session, turn)
	if withCopy {
		extra += `,"committed_kv_copy":{"source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[11,12,13,14]}`
	}
	return bookingJSON(id, "decode", "decode-0", extra)
}

// waitCandidate waits until the stage's candidate status satisfies ok.
func waitCandidate(t *testing.T, s *Sidecar, what string, ok func(*rolloutapi.CandidateStatus) bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, what, func(context.Context) error {
		if cs := s.Stage.Status(); !ok(cs) {
			return fmt.Errorf("candidate status %+v", cs)
		}
		return nil
	})
}

// startStagedSidecar runs a sidecar on a mounted compiled ConfigMap of
// fetchConfig, ready, with the simulated worker decode-0 registered.
func startStagedSidecar(t *testing.T) (*kubeletDir, *Sidecar, *simworker.Server) {
	t.Helper()
	k := newKubeletDir(t, fetchConfig)
	s := startSidecar(t, testCatalog(t), "", func(o *Options) { o.ConfigFile, o.ConfigDir, o.Poll = "", k.dir, 50*time.Millisecond })
	waitHash(t, s.Dispatcher, compiledHashOf(fetchConfig))
	w := startWorker(t, "decode-0")
	registerWorker(t, s, w)
	return k, s, w
}

// TestStagedRolloutDir runs a rollout's stages through a mounted compiled
// ConfigMap and real bookings over loopback HTTP, with hints delivered to
// a simulated worker. Planted: the candidate drops kv-fetch.
//
//   - shadow: every booking is answered, and delivered, with the stable
//     config's hint (Kvhint-Config-Hash the stable hash); every booking
//     with a committed copy (a kv.fetch in the stable hint) differs, by
//     kv.fetch, and no other does;
//   - canary 10%: about a tenth of the sessions are answered by the
//     candidate (its hash, no kv.fetch), each session always by the same
//     config;
//   - a candidate that does not load: refused with its error, the stable
//     config answers every booking;
//   - no stage: the candidate's dispatcher is gone.
func TestStagedRolloutDir(t *testing.T) {
	k, s, w := startStagedSidecar(t)
	stableHash, candHash := compiledHashOf(fetchConfig), compiledHashOf(noFetchConfig)

	// Shadow.
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageShadow}))
	waitCandidate(t, s, "the candidate loaded in shadow", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Stage == rolloutapi.StageShadow
	})
	const n = 40
	withCopy := 0
	for i := range n {
		copied := i%4 != 0
		if copied {
			withCopy++
		}
		resp := post(t, s, booking.Path, stagedBooking(fmt.Sprintf("shadow-%d", i), fmt.Sprintf("s%d", i), 1, copied))
		if resp.status != http.StatusOK {
			t.Fatalf("shadow booking %d: %d %s", i, resp.status, resp.body)
		}
		if got := resp.header.Get(booking.HeaderConfigHash); got != stableHash {
			t.Fatalf("shadow booking %d answered with config %q, want the stable %s", i, got, stableHash)
		}
		if fetch := strings.Contains(resp.body, `"`+hints.ActionKVFetch+`"`); fetch != copied {
			t.Fatalf("shadow booking %d: kv.fetch in the answer %v, want %v: %s", i, fetch, copied, resp.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := w.WaitForHints(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	fetches := 0
	for _, h := range got {
		if strings.Contains(string(h.Body), `"`+hints.ActionKVFetch+`"`) {
			fetches++
		}
	}
	if len(got) != n || fetches != withCopy {
		t.Errorf("the worker received %d hints, %d with kv.fetch; want %d, %d (the stable config's, and only those)", len(got), fetches, n, withCopy)
	}
	sc := s.Stage.Shadow()[candHash]
	want := rolloutapi.ShadowCounts{Bookings: n, Differ: int64(withCopy),
		ByAction: map[string]int64{hints.ActionKVFetch: int64(withCopy)}, ByRole: map[string]int64{"decode": int64(withCopy)}}
	if sc == nil || fmt.Sprint(*sc) != fmt.Sprint(want) {
		t.Errorf("shadow counts %+v, want %+v", sc, want)
	}
	for _, tc := range []struct {
		metric string
		labels map[string]string
		want   int
	}{
		{"kvhint_shadow_bookings_total", map[string]string{"role": "decode", "result": "differ"}, withCopy},
		{"kvhint_shadow_bookings_total", map[string]string{"role": "decode", "result": "same"}, n - withCopy},
		{"kvhint_shadow_action_diff_total", map[string]string{"role": "decode", "action": hints.ActionKVFetch}, withCopy},
	} {
		if v := gathered(t, s.Metrics, tc.metric, tc.labels); v != float64(tc.want) {
			t.Errorf("%s%v = %v, want %d", tc.metric, tc.labels, v, tc.want)
		}
	}
	t.Logf("shadow: %d of %d bookings differ, by action %v", sc.Differ, sc.Bookings, sc.ByAction)

	// Canary, 10% of sessions.
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageCanary, Weight: 10}))
	waitCandidate(t, s, "the candidate in a 10% canary", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Stage == rolloutapi.StageCanary && cs.Weight == 10
	})
	const sessions, turns = 400, 2
	onCandidate := 0
	for i := range sessions {
		var first string
		for turn := 1; turn <= turns; turn++ {
			resp := post(t, s, booking.Path, stagedBooking(fmt.Sprintf("canary-%d-%d", i, turn), fmt.Sprintf("session-%d", i), turn, true))
			if resp.status != http.StatusOK {
				t.Fatalf("canary booking: %d %s", resp.status, resp.body)
			}
			h := resp.header.Get(booking.HeaderConfigHash)
			if h != stableHash && h != candHash {
				t.Fatalf("booking answered with config %q, neither stable %s nor candidate %s", h, stableHash, candHash)
			}
			if fetch := strings.Contains(resp.body, `"`+hints.ActionKVFetch+`"`); fetch != (h == stableHash) {
				t.Fatalf("config %s answered a hint with kv.fetch=%v: %s", h, fetch, resp.body)
			}
			if turn == 1 {
				first = h
			} else if h != first {
				t.Fatalf("session %d: turn %d booked with %s, turn 1 with %s", i, turn, h, first)
			}
		}
		if first == candHash {
			onCandidate++
		}
	}
	// Binomial(400, 0.1): mean 40, sd 6; 4 sd either side.
	if onCandidate < 16 || onCandidate > 64 {
		t.Errorf("%d of %d sessions on the candidate at weight 10, want about 40", onCandidate, sessions)
	}
	t.Logf("canary 10%%: %d of %d sessions (%.1f%%) booked by the candidate", onCandidate, sessions, 100*float64(onCandidate)/sessions)

	// A candidate that does not load.
	k.swapData(stagedData(t, fetchConfig, invalidConfig, rolloutapi.Stage{Stage: rolloutapi.StageShadow}))
	waitCandidate(t, s, "the broken candidate refused", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Assigned == compiledHashOf(invalidConfig) && cs.Active == "" && strings.Contains(cs.Error, "no-such-policy")
	})
	if s.Stage.Candidate() != nil || s.Stage.Shadow() != nil {
		t.Error("a refused candidate runs")
	}
	for i := range 20 {
		resp := post(t, s, booking.Path, stagedBooking(fmt.Sprintf("refused-%d", i), fmt.Sprintf("r%d", i), 1, true))
		if resp.status != http.StatusOK || resp.header.Get(booking.HeaderConfigHash) != stableHash {
			t.Fatalf("booking beside a refused candidate: %d, config %q, want 200 and %s", resp.status, resp.header.Get(booking.HeaderConfigHash), stableHash)
		}
	}
	if s.Dispatcher.ConfigHash() != stableHash {
		t.Errorf("the stable config is %s, want %s", s.Dispatcher.ConfigHash(), stableHash)
	}

	// The rollout ends: no stage.
	k.swapData(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageCanary, Weight: 100}))
	waitCandidate(t, s, "the candidate at 100%", func(cs *rolloutapi.CandidateStatus) bool { return cs != nil && cs.Weight == 100 })
	if resp := post(t, s, booking.Path, stagedBooking("all-1", "x", 1, true)); resp.header.Get(booking.HeaderConfigHash) != candHash {
		t.Errorf("a booking at weight 100 answered with config %q, want %s", resp.header.Get(booking.HeaderConfigHash), candHash)
	}
	k.swapData(compiledData(fetchConfig, decodeRoles))
	waitCandidate(t, s, "the candidate removed", func(cs *rolloutapi.CandidateStatus) bool { return cs == nil })
	if s.Stage.Candidate() != nil {
		t.Error("the candidate's dispatcher outlives its stage")
	}
	if resp := post(t, s, booking.Path, stagedBooking("after-1", "x", 2, true)); resp.header.Get(booking.HeaderConfigHash) != stableHash {
		t.Errorf("a booking after the rollout answered with config %q, want %s", resp.header.Get(booking.HeaderConfigHash), stableHash)
	}
}

// TestKubernetesConfigStatus runs a staged rollout through the watched
// ConfigMap against a real API server and reads what the sidecar writes
// on its own Pod (rolloutapi.ConfigStatusAnnotation): the stable config
// assigned and active; a refused candidate with its error while the
// stable config answers every booking (Kvhint-Config-Hash on a 204 as
// well); a canary's candidate active with its stage; the candidate gone
// with its stage; and a refused stable config that stays on its last good
// one and says why.
func TestKubernetesConfigStatus(t *testing.T) {
	env := testenv.Get(t)
	kc := env.Kube
	ns := testenv.NewNamespace(t, env.Client, "rollout")
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, testPod("router-0", map[string]string{wellknown.RouterLabel: "llama"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := kc.CoreV1().ConfigMaps(ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ConfigMapName("llama")}, Data: compiledData(fetchConfig, decodeRoles)}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{
		Catalog: testCatalog(t), ConfigMap: cm.Name, Namespace: ns, PodName: "router-0", PodNamespace: ns, Kube: kc,
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", Log: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	stableHash, candHash, brokenHash := compiledHashOf(fetchConfig), compiledHashOf(noFetchConfig), compiledHashOf(invalidConfig)
	update := func(data map[string]string) {
		t.Helper()
		cm.Data = data
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus := func(what string, want rolloutapi.ConfigStatus, errHas string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, what, func(context.Context) error {
			p, err := pods.Get(ctx, "router-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			raw := p.Annotations[rolloutapi.ConfigStatusAnnotation]
			var got rolloutapi.ConfigStatus
			if err := json.Unmarshal([]byte(raw), &got); err != nil {
				return fmt.Errorf("annotation %s = %q: %v", rolloutapi.ConfigStatusAnnotation, raw, err)
			}
			if len(raw) > rolloutapi.MaxConfigStatusBytes {
				return fmt.Errorf("annotation is %d bytes, over %d", len(raw), rolloutapi.MaxConfigStatusBytes)
			}
			// The errors are checked by what they name.
			gotErr := got.Error
			if got.Candidate != nil {
				c := *got.Candidate
				gotErr += c.Error
				c.Error = ""
				got.Candidate = &c
			}
			got.Error = ""
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("config status (-want +got):\n%s", diff)
			}
			if !strings.Contains(gotErr, errHas) || (errHas == "" && gotErr != "") {
				return fmt.Errorf("config status errors %q, want one naming %q", gotErr, errHas)
			}
			if h := p.Annotations[wellknown.AppliedHashAnnotation]; h != want.Active {
				return fmt.Errorf("applied hash %q, want %q", h, want.Active)
			}
			return nil
		})
	}
	book := func(id string) string {
		t.Helper()
		resp := post(t, s, booking.Path, stagedBooking(id, id, 1, true))
		if resp.status != http.StatusNoContent { // no worker is registered: unknown_worker
			t.Fatalf("booking %s: %d %s", id, resp.status, resp.body)
		}
		return resp.header.Get(booking.HeaderConfigHash)
	}

	stable := rolloutapi.ConfigStatus{Assigned: stableHash, Active: stableHash, LastKnownGood: stableHash}
	waitStatus("the stable config reported", stable, "")

	update(stagedData(t, fetchConfig, invalidConfig, rolloutapi.Stage{Stage: rolloutapi.StageShadow}))
	refused := stable
	refused.Candidate = &rolloutapi.CandidateStatus{Assigned: brokenHash, Stage: rolloutapi.StageShadow}
	waitStatus("the broken candidate refused", refused, "no-such-policy")
	for i := range 5 {
		if h := book(fmt.Sprintf("refused-%d", i)); h != stableHash {
			t.Fatalf("a booking beside the refused candidate answered with config %q, want %s", h, stableHash)
		}
	}

	update(stagedData(t, fetchConfig, noFetchConfig, rolloutapi.Stage{Stage: rolloutapi.StageCanary, Weight: 10}))
	canary := stable
	canary.Candidate = &rolloutapi.CandidateStatus{Assigned: candHash, Active: candHash, Stage: rolloutapi.StageCanary, Weight: 10}
	waitStatus("the candidate in a 10% canary", canary, "")

	update(compiledData(fetchConfig, decodeRoles))
	waitStatus("the candidate gone", stable, "")
	if s.Stage.Candidate() != nil {
		t.Error("the candidate's dispatcher outlives its stage")
	}

	update(compiledData(invalidConfig, decodeRoles))
	broken := rolloutapi.ConfigStatus{Assigned: brokenHash, Active: stableHash, LastKnownGood: stableHash}
	waitStatus("the broken stable config refused", broken, "no-such-policy")
	if h := book("after-broken"); h != stableHash {
		t.Errorf("a booking after a refused stable config answered with config %q, want %s", h, stableHash)
	}
}

// TestCandidateWorkerPools: a candidate that moves a role to other
// workers books its canary with its own worker pools, over loopback HTTP
// with simulated workers registered through the API. Planted: the stable
// config's decode pool is component=decode-v1 (worker old-0), the
// candidate's component=decode-v2 (worker new-0); the canary takes every
// session. The candidate hints new-0 and finds old-0 outside its pool;
// the stable config, before and after the rollout, the other way round.
// Before, the candidate's bookings were held to the stable config's
// pools: it hinted old-0, and new-0 was not_in_pool.
func TestCandidateWorkerPools(t *testing.T) {
	pooled := func(component string) string {
		return "decode:\n  routerMode: kv\n  workerSelector:\n    matchLabels: {component: " + component + "}\n"
	}
	stable, cand := compiledData(fetchConfig, pooled("decode-v1")), compiledData(noFetchConfig, pooled("decode-v2"))
	k := &kubeletDir{t: t, dir: t.TempDir()}
	k.swapData(stable)
	for _, key := range []string{wellknown.HintsConfigKey, wellknown.RolesKey} {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(k.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	s := startSidecar(t, testCatalog(t), "", func(o *Options) { o.ConfigFile, o.ConfigDir, o.Poll = "", k.dir, 50*time.Millisecond })
	waitHash(t, s.Dispatcher, compiled.Hash(stable))
	sims := map[string]*simworker.Server{}
	for id, component := range map[string]string{"old-0": "decode-v1", "new-0": "decode-v2"} {
		w := startWorker(t, id)
		sims[id] = w
		body := fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q,"worker_type":"decode","labels":{"component":%q}}`, w.HintEndpoint(), component)
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.BookingAddr()+"/v1/workers/"+id, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if resp := roundTrip(t, http.DefaultClient, req); resp.status != http.StatusOK {
			t.Fatalf("registering %s: %d %s", id, resp.status, resp.body)
		}
	}
	book := func(id, worker string) response {
		t.Helper()
		return post(t, s, booking.Path, bookingJSON(id, "decode", worker, fmt.Sprintf(`"session":{"id":%q,"turn":1}`, id)))
	}
	outcomes := func(phase, wantHash string, want map[string]string) {
		t.Helper()
		for worker, outcome := range want {
			resp := book(phase+"-"+worker, worker)
			if got := resp.header.Get(booking.HeaderOutcome); got != outcome {
				t.Errorf("%s: a booking on %s: outcome %q, want %q (%d %s)", phase, worker, got, outcome, resp.status, resp.body)
			}
			if got := resp.header.Get(booking.HeaderConfigHash); got != wantHash {
				t.Errorf("%s: a booking on %s answered by config %q, want %s", phase, worker, got, wantHash)
			}
		}
	}
	stableHash, candHash := compiled.Hash(stable), compiled.Hash(cand)
	outcomes("before", stableHash, map[string]string{"old-0": "hinted", "new-0": "not_in_pool"})

	data, err := compiled.StagedData(stable, cand, rolloutapi.Stage{Candidate: candHash, Stage: rolloutapi.StageCanary, Weight: 100})
	if err != nil {
		t.Fatal(err)
	}
	k.swapData(data)
	waitCandidate(t, s, "the candidate in a 100% canary", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Active == candHash && cs.Weight == 100
	})
	outcomes("canary", candHash, map[string]string{"old-0": "not_in_pool", "new-0": "hinted"})
	// The candidate's hint reached new-0 over HTTP, the first it got.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := sims["new-0"].WaitForHints(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(string(got[0].Body), `"canary-new-0"`) {
		t.Errorf("new-0 received %d hints, the first %q; want the canary booking's", len(got), got[0].Body)
	}
	// The registry says which pools each worker is in, for each config.
	get := func(path string) response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.BookingAddr()+path, nil)
		return roundTrip(t, http.DefaultClient, req)
	}
	pools := func(id string) string {
		t.Helper()
		resp := get("/v1/workers/" + id)
		var w struct {
			Pools     []string `json:"pools"`
			Candidate []string `json:"candidate_pools"`
		}
		if err := json.Unmarshal([]byte(resp.body), &w); err != nil || resp.status != http.StatusOK {
			t.Fatalf("GET /v1/workers/%s: %d %s (%v)", id, resp.status, resp.body, err)
		}
		return fmt.Sprintf("stable %v, candidate %v", w.Pools, w.Candidate)
	}
	for id, want := range map[string]string{"old-0": "stable [decode], candidate []", "new-0": "stable [], candidate [decode]"} {
		if got := pools(id); got != want {
			t.Errorf("%s during the canary: %s, want %s", id, got, want)
		}
	}

	// A candidate refused puts no pools in force.
	broken := compiledData(invalidConfig, pooled("decode-v2"))
	if data, err = compiled.StagedData(stable, broken, rolloutapi.Stage{Candidate: compiled.Hash(broken), Stage: rolloutapi.StageCanary, Weight: 100}); err != nil {
		t.Fatal(err)
	}
	k.swapData(data)
	waitCandidate(t, s, "the broken candidate refused", func(cs *rolloutapi.CandidateStatus) bool {
		return cs != nil && cs.Assigned == compiled.Hash(broken) && cs.Error != ""
	})
	if got := pools("new-0"); got != "stable [], candidate []" {
		t.Errorf("new-0 beside a refused candidate: %s", got)
	}

	k.swapData(stable)
	waitCandidate(t, s, "the candidate removed", func(cs *rolloutapi.CandidateStatus) bool { return cs == nil })
	outcomes("after", stableHash, map[string]string{"old-0": "hinted", "new-0": "not_in_pool"})
	if got := pools("new-0"); got != "stable [], candidate []" {
		t.Errorf("new-0 after the rollout: %s", got)
	}
}
