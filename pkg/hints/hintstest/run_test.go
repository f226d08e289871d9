package hintstest_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
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
		}}, hintstest.Suite{Params: []string{`{"ttl_seconds": 5}`}}, `{"ttl_seconds": "NaN"}: accepted`},
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
		}), hintstest.Suite{}, "not deterministic"},
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
		{"bad type name", hints.HintProvider{Type: "Bad_Type", Parse: func(hints.Params) (hints.HintPolicy, error) { return nil, nil }},
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
