package hints_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

// pinParams are the parameters of the example policy.
type pinParams struct {
	Tier       string `json:"tier"`
	TTLSeconds int    `json:"ttl_seconds"`
}

// pinProvider describes a hint policy that pins a session's blocks in a
// memory tier on every non-final turn.
func pinProvider() hints.HintProvider {
	return hints.HintProvider{
		Type:         "kv-pin",
		DefaultHosts: []hints.HintHost{hints.WorkerSelection("kvcr")},
		Description:  "vendor.kv-pin@1.0: pin a session's blocks in a memory tier",
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := pinParams{Tier: "hbm", TTLSeconds: 60}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			if err := hints.IntInRange("ttl_seconds", int64(p.TTLSeconds), 1, 3600); err != nil {
				return nil, err
			}
			return hints.HintPolicyFunc(func(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
				if hc.Session.ID == "" || hc.Session.Final {
					return nil, nil
				}
				w := hc.PayloadWriter(64)
				w.String("tier", p.Tier)
				w.Int("ttl_seconds", int64(p.TTLSeconds))
				payload, err := hc.ClosePayload(&w)
				return []hints.Action{{Type: "vendor.kv-pin", Version: "1.0", Payload: payload}}, err
			}), nil
		},
	}
}

// A plugin from provider to actions: register the provider, parse a
// policy as a role's parameters would, and run it on a booking the way the
// dispatcher does.
func Example() {
	cat := builtin.NewCatalog() // holds kvcr, which the provider hosts
	if err := cat.RegisterHint(pinProvider()); err != nil {
		panic(err)
	}
	p, _ := cat.Hint("kv-pin")
	policy, err := p.Parse(hints.Params(`{"tier": "dram"}`))
	if err != nil {
		panic(err)
	}
	actions, err := hintstest.BuildHints(context.Background(), policy, p.Commitments, hintstest.Booking{
		RequestID: "r1", Role: "decode", Worker: "decode-0", PromptTokens: 4096, BlockSize: 16,
		Session: hints.Session{ID: "chat-7", Turn: 2},
	})
	if err != nil {
		panic(err)
	}
	for _, a := range actions {
		fmt.Printf("%s@%s %s\n", a.Type, a.Version, a.Payload.Bytes())
	}
	fmt.Println("runs by default under kvcr:", slices.ContainsFunc(cat.DefaultHints("kvcr"), func(p *hints.HintProvider) bool { return p.Type == "kv-pin" }))
	// Output:
	// vendor.kv-pin@1.0 {"tier":"dram","ttl_seconds":60}
	// runs by default under kvcr: true
}

// Parameters are strict: the error names the key and says what is allowed.
func ExampleDecodeParams() {
	_, err := pinProvider().Parse(hints.Params(`{"ttl": 30}`))
	fmt.Println(err)
	_, err = pinProvider().Parse(hints.Params(`{"ttl_seconds": 0}`))
	fmt.Println(err)
	// Output:
	// parameter "ttl": unknown parameter; known: tier, ttl_seconds
	// parameter "ttl_seconds": 0 is out of range 1..3600
}

// ObjectWriter writes a payload with its keys in ascending order, as the
// wire format asks; a key out of order is an error, never a wrong payload.
func ExampleObjectWriter() {
	w := hints.NewObjectWriter(nil)
	w.Uint64s("block_hashes", []uint64{11, 18446744073709551615})
	w.String("source_control_endpoint", "tcp://10.0.0.7:23280")
	p, err := w.Payload()
	fmt.Println(string(p.Bytes()), err)

	w = hints.NewObjectWriter(nil)
	w.String("tier", "hbm")
	w.Int("priority", 1)
	_, err = w.Payload()
	fmt.Println(err)
	// Output:
	// {"block_hashes":[11,18446744073709551615],"source_control_endpoint":"tcp://10.0.0.7:23280"} <nil>
	// payload key "priority" written after "tier": keys must ascend
}

// CheckAction is what the dispatcher holds every action to before it is
// sent: here, a kv.fetch without blocks, which an engine would refuse.
func ExampleCheckAction() {
	empty := hints.RawPayload([]byte(`{"block_hashes":[]}`))
	fmt.Println(hints.CheckAction(&hints.Action{Type: "kv.fetch", Version: "1.0", Payload: empty}))
	// Output:
	// action kv.fetch@1.0: kv.fetch: block_hashes must be a non-empty list of integers in [0, 2^64)
}
