package hintstest_test

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

// strictParams is a well-behaved parameter set.
type strictParams struct {
	TTL float64 `json:"ttl_seconds"`
}

func strictParse(raw hints.Params) (strictParams, error) {
	p := strictParams{TTL: 60}
	if err := hints.DecodeParams(raw, &p); err != nil {
		return p, err
	}
	return p, hints.FloatInRange("ttl_seconds", p.TTL, 1, 3600)
}

// provider builds a test provider whose policy is build.
func provider(typ string, c hints.Commitments, build func(hc *hints.HintContext) ([]hints.Action, error)) hints.HintProvider {
	return hints.HintProvider{Type: typ, Commitments: c, Parse: func(raw hints.Params) (hints.HintPolicy, error) {
		if _, err := strictParse(raw); err != nil {
			return nil, err
		}
		return hints.HintPolicyFunc(func(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) { return build(hc) }), nil
	}}
}

func evict(hc *hints.HintContext) ([]hints.Action, error) {
	if !hc.Session.Final {
		return nil, nil
	}
	w := hc.PayloadWriter(64)
	w.String("execute_at", "request_completion")
	p, err := hc.ClosePayload(&w)
	return []hints.Action{{Type: "kv.evict", Version: "1.0", Payload: p}}, err
}

// TestCheckPasses: a policy that keeps the contract has nothing reported.
func TestCheckPasses(t *testing.T) {
	p := provider("good", 0, evict)
	if errs := hintstest.Check(p, hintstest.Suite{Params: []string{`{}`, `{"ttl_seconds": 5}`},
		BadParams: map[string]string{`{"ttl_seconds": 0}`: "ttl_seconds"}}); len(errs) > 0 {
		t.Fatalf("Check: %v", errs)
	}
}

// TestCheckFinds: each broken plugin is reported, with words that say what
// is wrong.
func TestCheckFinds(t *testing.T) {
	var calls atomic.Int64
	var kept atomic.Pointer[hints.HintContext]
	for _, tc := range []struct {
		name  string
		p     hints.HintProvider
		suite hintstest.Suite
		want  string
	}{
		{"lax parameters", hints.HintProvider{Type: "lax", Parse: func(hints.Params) (hints.HintPolicy, error) {
			return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return nil, nil }), nil
		}}, hintstest.Suite{}, `"hintstest_unknown_key": 1}: accepted`},
		{"NaN accepted", hints.HintProvider{Type: "nan", Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			var m map[string]any
			_ = json.Unmarshal(raw, &m)
			if s, ok := m["ttl_seconds"].(string); ok {
				if _, err := strconv.ParseFloat(s, 64); err != nil {
					return nil, hints.ParamErrorf("ttl_seconds", "not a number")
				}
			} else if _, ok := m["ttl_seconds"]; !ok && len(m) > 0 {
				return nil, hints.ParamErrorf("", "unknown")
			}
			return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return nil, nil }), nil
		}}, hintstest.Suite{Params: []string{`{"ttl_seconds": 5}`}}, `parameter "ttl_seconds" takes any number: .inf and -.inf in the hints YAML`},
		{"error without the key", hints.HintProvider{Type: "vague", Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			if _, err := strictParse(raw); err != nil {
				return nil, context.DeadlineExceeded
			}
			return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return nil, nil }), nil
		}}, hintstest.Suite{}, "want a *hints.ParamError naming"},
		{"empty fetch", provider("empty-fetch", 0, func(*hints.HintContext) ([]hints.Action, error) {
			return []hints.Action{{Type: "kv.fetch", Version: "1.0", Payload: hints.RawPayload([]byte(`{"block_hashes":[]}`))}}, nil
		}), hintstest.Suite{}, "block_hashes must be a non-empty list"},
		{"fetch without a source", provider("sourceless-fetch", 0, func(*hints.HintContext) ([]hints.Action, error) {
			return []hints.Action{{Type: "kv.fetch", Version: "1.0", Payload: hints.RawPayload([]byte(`{"block_hashes":[1]}`))}}, nil
		}), hintstest.Suite{}, "source_control_endpoint is required"},
		// A policy that copies the endpoint through without looking breaks
		// on the default booking whose copy has none.
		{"fetch of a copy without an endpoint", provider("forwarder", hints.KVCopy, func(hc *hints.HintContext) ([]hints.Action, error) {
			c := hc.CommittedKVCopy()
			if c == nil || len(c.BlockHashes) == 0 {
				return nil, nil
			}
			w := hc.PayloadWriter(64 + 21*len(c.BlockHashes))
			w.Uint64s("block_hashes", c.BlockHashes)
			w.String("source_control_endpoint", c.SourceEndpoint)
			p, err := hc.ClosePayload(&w)
			return []hints.Action{{Type: "kv.fetch", Version: "1.0", Payload: p}}, err
		}), hintstest.Suite{}, "booking copy-no-endpoint: action 1: action kv.fetch@1.0: kv.fetch: source_control_endpoint must be a non-empty string"},
		{"unsorted keys", provider("unsorted", 0, func(*hints.HintContext) ([]hints.Action, error) {
			return []hints.Action{{Type: "kv.retain", Version: "1.0", Payload: hints.RawPayload([]byte(`{"z":1,"a":2}`))}}, nil
		}), hintstest.Suite{}, "keys must ascend"},
		{"not deterministic", provider("counter", 0, func(*hints.HintContext) ([]hints.Action, error) {
			w := hints.NewObjectWriter(nil)
			w.Int("n", calls.Add(1))
			p, err := w.Payload()
			return []hints.Action{{Type: "vendor.count", Version: "1.0", Payload: p}}, err
		}), hintstest.Suite{}, "not deterministic"},
		{"keeps the context", provider("keeper", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
			prev := kept.Swap(hc)
			w := hints.NewObjectWriter(nil)
			if prev != nil {
				w.String("previous", prev.RequestID)
			}
			p, err := w.Payload()
			return []hints.Action{{Type: "vendor.keep", Version: "1.0", Payload: p}}, err
		}), hintstest.Suite{}, "the policy keeps the HintContext (or memory it reaches) past its return"},
		{"sorts the hashes", provider("sorter", hints.KVCopy, func(hc *hints.HintContext) ([]hints.Action, error) {
			if c := hc.CommittedKVCopy(); c != nil {
				slices.Sort(c.BlockHashes)
			}
			return nil, nil
		}), hintstest.Suite{}, "modified the booking's block hashes"},
		{"undeclared copy", provider("peeker", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
			_ = hc.CommittedKVCopy()
			return nil, nil
		}), hintstest.Suite{}, "does not declare hints.KVCopy"},
		{"bad type name", hints.HintProvider{Type: "Bad Type", Parse: func(hints.Params) (hints.HintPolicy, error) { return nil, nil }},
			hintstest.Suite{}, "provider does not register"},
		{"panicking parse", hints.HintProvider{Type: "panics", Parse: func(hints.Params) (hints.HintPolicy, error) { panic("boom") }},
			hintstest.Suite{}, "Parse panicked: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := hintstest.Check(tc.p, tc.suite)
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Fatalf("Check reported %d problems:\n%s\nwant one containing %q", len(errs), strings.Join(msgs, "\n"), tc.want)
			}
		})
	}
}

// fire returns one well-formed action.
func fire(typ string) []hints.Action {
	w := hints.NewObjectWriter(nil)
	w.Int("n", 1)
	p, _ := w.Payload()
	return []hints.Action{{Type: typ, Version: "1.0", Payload: p}}
}

// fetchOf writes a kv.fetch of the booking's copy, or nil.
func fetchOf(hc *hints.HintContext) []hints.Action {
	c := hc.CommittedKVCopy()
	if c == nil || c.SourceEndpoint == "" {
		return nil
	}
	w := hc.PayloadWriter(64 + 21*len(c.BlockHashes))
	w.Uint64s("block_hashes", c.BlockHashes)
	w.String("source_control_endpoint", c.SourceEndpoint)
	p, _ := hc.ClosePayload(&w)
	return []hints.Action{{Type: "kv.fetch", Version: "1.0", Payload: p}}
}

func reportOf(errs []error) string {
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	return strings.Join(msgs, "\n")
}

// TestCheckFindsTheAuthorsFaults: the faults a plugin author made from the
// tutorial (issue 20), each fed to the kit, each reported in words that say
// what is wrong. Before, the kit passed every one of them.
func TestCheckFindsTheAuthorsFaults(t *testing.T) {
	var cached atomic.Pointer[hints.Payload]
	kvcr := []hints.HintHost{hints.WorkerSelection("kvcr")}
	for _, tc := range []struct {
		name  string
		p     hints.HintProvider
		suite hintstest.Suite
		want  []string
		linux bool // the check counts the thread's context switches
	}{
		{name: "an ObjectWriter error the policy returns", p: provider("writer-error", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
			w := hints.NewObjectWriter(nil)
			w.Int("z", 1)
			w.Int("a", 2)
			p, err := w.Payload()
			return []hints.Action{{Type: "vendor.x", Version: "1.0", Payload: p}}, err
		}), want: []string{"booking plain: BuildHints returned an error:", "the dispatcher drops the policy's actions on the booking and counts a failure"}},
		{name: "an error on every booking", p: provider("always-errs", 0, func(*hints.HintContext) ([]hints.Action, error) {
			return nil, context.Canceled
		}), want: []string{"booking session-final: BuildHints returned an error: context canceled"}},
		{name: "a 5 ms sleep under NeverBlocks", linux: true, p: func() hints.HintProvider {
			p := provider("sleeper", 0, func(*hints.HintContext) ([]hints.Action, error) {
				time.Sleep(5 * time.Millisecond)
				return fire("vendor.sleep"), nil
			})
			p.NeverBlocks = true
			return p
		}(), suite: hintstest.Suite{Bookings: []hintstest.Booking{{RequestID: "r1", Role: "decode", Worker: "w"}}},
			want: []string{"booking r1: BuildHints blocked although the provider declares NeverBlocks: it was off the CPU for", "over the dispatcher's default deadline of 1ms, and its thread slept"}},
		{name: "a 5 ms sleep", linux: true, p: provider("plain-sleeper", 0, func(*hints.HintContext) ([]hints.Action, error) {
			time.Sleep(5 * time.Millisecond)
			return fire("vendor.sleep"), nil
		}), suite: hintstest.Suite{Bookings: []hintstest.Booking{{RequestID: "r1", Role: "decode", Worker: "w"}}},
			want: []string{"booking r1: BuildHints blocked: it was off the CPU for", "the dispatcher drops the actions of a policy that overruns its deadline"}},
		{name: "an unchecked float range", p: hints.HintProvider{Type: "unchecked", Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := struct {
				Weight float64 `json:"weight"`
			}{Weight: 1}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return fire("vendor.w"), nil }), nil
		}}, suite: hintstest.Suite{Params: []string{`{"weight": 2}`}}, want: []string{`parameter "weight" takes any number`}},
		{name: "two kv.fetch from one policy", p: provider("double-fetch", hints.KVCopy, func(hc *hints.HintContext) ([]hints.Action, error) {
			return append(fetchOf(hc), fetchOf(hc)...), nil
		}), want: []string{"booking copy-1: action 2: a second kv.fetch from one policy"}},
		{name: "kv.fetch without KVCopy", p: provider("undeclared-fetch", 0, func(*hints.HintContext) ([]hints.Action, error) {
			return []hints.Action{{Type: "kv.fetch", Version: "1.0", Payload: hints.RawPayload([]byte(`{"block_hashes":[1,2,3],"source_control_endpoint":"tcp://x:1"}`))}}, nil
		}), want: []string{"action 1: a kv.fetch from a provider that does not declare hints.KVCopy; only the role's KV copy sender may send one"}},
		{name: "40 actions", p: provider("forty", 0, func(*hints.HintContext) ([]hints.Action, error) {
			var out []hints.Action
			for range 40 {
				out = append(out, fire("vendor.many")...)
			}
			return out, nil
		}), want: []string{"returned 40 actions; a hint carries at most 32"}},
		{name: "a default-hosted Parse that fails with no parameters", p: hints.HintProvider{Type: "needs-limit", DefaultHosts: kvcr, Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			var p struct {
				Limit *int `json:"limit"`
			}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if p.Limit == nil {
				return nil, hints.ParamErrorf("limit", "is required")
			}
			return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return nil, nil }), nil
		}}, suite: hintstest.Suite{Params: []string{`{"limit": 3}`}},
			want: []string{"provider does not register in the build's catalog", `its Parse refuses no parameters, which is what a role that leaves hints out runs it with: parameter "limit": is required`}},
		{name: "the tutorial's default-hosted KVCopy policy", p: func() hints.HintProvider {
			p := provider("copy-audit", hints.KVCopy, func(hc *hints.HintContext) ([]hints.Action, error) { return fetchOf(hc), nil })
			p.DefaultHosts = kvcr
			return p
		}(), want: []string{`"copy-audit" declares KVCopy and would run by default under worker-selection kvcr, where "kv-fetch" already sends the committed KV copy by default`}},
		{name: "a policy that never fires", p: provider("silent", 0, func(*hints.HintContext) ([]hints.Action, error) { return nil, nil }),
			want: []string{"the policy produced no action on any of the 12 bookings", "Suite.NeverFires"}},
		{name: "unsorted keys only on 200k-token prompts", p: provider("long-only", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
			if hc.PromptTokens < 200_000 {
				return nil, nil
			}
			return []hints.Action{{Type: "vendor.long", Version: "1.0", Payload: hints.RawPayload([]byte(`{"z":1,"a":2}`))}}, nil
		}), want: []string{"booking long-prompt: action 1:", "keys must ascend"}},
		{name: "a panicking policy", p: provider("panicker", 0, func(*hints.HintContext) ([]hints.Action, error) { panic("boom") }),
			want: []string{"booking plain: BuildHints panicked: boom"}},
		{name: "a cached arena payload", p: provider("cacher", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
			if p := cached.Load(); p != nil {
				return []hints.Action{{Type: "vendor.cache", Version: "1.0", Payload: *p}}, nil
			}
			w := hc.PayloadWriter(32)
			w.String("tier", "hbm")
			p, err := hc.ClosePayload(&w)
			cached.Store(&p)
			return []hints.Action{{Type: "vendor.cache", Version: "1.0", Payload: p}}, err
		}), want: []string{`\xff\xff`}},
		// The slice the policy returns is one it keeps and appends into on
		// every booking, so a booking's actions change under the
		// dispatcher when the next booking is built. Sequential runs that
		// copy each result out at once never see it; -race sees it only
		// when two bookings happen to overlap.
		{name: "a returned slice reused on every booking", p: func() hints.HintProvider {
			var kept []hints.Action
			return provider("reuser", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
				w := hints.NewObjectWriter(nil)
				w.String("request", hc.RequestID)
				p, err := w.Payload()
				kept = append(kept[:0], hints.Action{Type: "vendor.reuse", Version: "1.0", Payload: p})
				return kept, err
			})
		}(), want: []string{"booking plain: action 1 changed when booking", "was built next", "returns memory it reuses on every booking"}},
		// The lent action slice is the booking's: a policy that keeps it
		// and returns it again hands back memory the dispatcher has since
		// reused, which the kit poisons after every run.
		{name: "a lent action slice kept", p: func() hints.HintProvider {
			var kept atomic.Pointer[[]hints.Action]
			return provider("keeper", 0, func(hc *hints.HintContext) ([]hints.Action, error) {
				if a := kept.Load(); a != nil {
					return *a, nil
				}
				a := append(hc.Actions(1), hints.Action{Type: "vendor.keep", Version: "1.0", Payload: hints.RawPayload([]byte(`{}`))})
				kept.Store(&a)
				return a, nil
			})
		}(), want: []string{"hintstest-context-after-return"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.linux && runtime.GOOS != "linux" {
				t.Skip("the blocking check counts context switches, on Linux only")
			}
			errs := hintstest.Check(tc.p, tc.suite)
			got := reportOf(errs)
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("Check reported %d problems:\n%s\nwant one containing %q", len(errs), got, want)
				}
			}
			if strings.ContainsRune(got, utf8.RuneError) || !utf8.ValidString(got) || strings.ContainsRune(got, 0) || strings.Contains(got, "\xff") {
				t.Errorf("the report is not plain text: %q", got)
			}
		})
	}
}

// TestCheckOptions: the options that let an author say what is intended,
// and the catalog a build changed with SetDefaultHosts.
func TestCheckOptions(t *testing.T) {
	silent := provider("silent", 0, func(*hints.HintContext) ([]hints.Action, error) { return nil, nil })
	if errs := hintstest.Check(silent, hintstest.Suite{NeverFires: true}); len(errs) > 0 {
		t.Errorf("NeverFires: %s", reportOf(errs))
	}
	unbounded := hints.HintProvider{Type: "unbounded", Parse: func(raw hints.Params) (hints.HintPolicy, error) {
		p := struct {
			Bias float64 `json:"bias"`
		}{}
		if err := hints.DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return hints.HintPolicyFunc(func(context.Context, *hints.HintContext) ([]hints.Action, error) { return fire("vendor.bias"), nil }), nil
	}}
	if errs := hintstest.Check(unbounded, hintstest.Suite{Params: []string{`{"bias": -3}`}, Unbounded: []string{"bias"}}); len(errs) > 0 {
		t.Errorf("Unbounded: %s", reportOf(errs))
	}
	// The tutorial's default-hosted KVCopy policy passes in a build that
	// took kv-fetch out of kvcr's defaults.
	cat := builtin.NewCatalog()
	if err := cat.SetDefaultHosts(builtin.TypeKVFetch); err != nil {
		t.Fatal(err)
	}
	audit := provider("copy-audit", hints.KVCopy, func(hc *hints.HintContext) ([]hints.Action, error) { return fetchOf(hc), nil })
	audit.DefaultHosts = []hints.HintHost{hints.WorkerSelection("kvcr")}
	audit.NeverBlocks = true
	if errs := hintstest.Check(audit, hintstest.Suite{Catalog: cat}); len(errs) > 0 {
		t.Errorf("copy-audit in a build without kv-fetch's default: %s", reportOf(errs))
	}
}

// TestKitLimitsAreTheDispatchers: the kit's bookings reach the dispatcher's
// default booking limit and no further, and its action limit is the
// dispatcher's.
func TestKitLimitsAreTheDispatchers(t *testing.T) {
	longest := 0
	for _, b := range hintstest.DefaultBookings() {
		if b.KVCopy == nil {
			continue
		}
		n := 21*len(b.KVCopy.BlockHashes) + len(b.KVCopy.SourceEndpoint)
		if n > dispatch.DefaultMaxBookingBytes {
			t.Errorf("booking %s: its copy may take %d bytes, over the dispatcher's limit of %d", b.RequestID, n, dispatch.DefaultMaxBookingBytes)
		}
		longest = max(longest, len(b.KVCopy.BlockHashes))
	}
	if 21*(longest+200) < dispatch.DefaultMaxBookingBytes {
		t.Errorf("the longest copy is %d blocks, well short of the dispatcher's limit", longest)
	}
	n := dispatch.MaxActions
	p := provider("at-the-limit", 0, func(*hints.HintContext) ([]hints.Action, error) {
		var out []hints.Action
		for range n {
			out = append(out, fire("vendor.many")...)
		}
		return out, nil
	})
	if errs := hintstest.Check(p, hintstest.Suite{}); len(errs) > 0 {
		t.Errorf("%d actions: %s", n, reportOf(errs))
	}
}
