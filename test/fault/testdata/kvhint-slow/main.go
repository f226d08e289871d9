// Command kvhint-slow is kvhint with one more hint policy linked in, the
// way a custom build links a plugin (examples/kv-offload): test-slow,
// which sleeps (sleep: a duration) or never returns (sleep: forever)
// before it returns one vendor.slow action. It does not declare
// NeverBlocks, so the sidecar runs it isolated, under the hard deadline.
// test/fault builds it for the slow-policy tests; it is no product.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kvrouter/kv-hint-operator/cmd/kvhint/app"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

type slowParams struct {
	Sleep string `json:"sleep"`
}

func main() {
	cat := builtin.NewCatalog()
	err := cat.RegisterHint(hints.HintProvider{
		Type:        "test-slow",
		Description: "vendor.slow@1.0 after sleeping for sleep (a duration, or forever)",
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			p := slowParams{Sleep: "5ms"}
			if err := hints.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			var d time.Duration
			if p.Sleep != "forever" {
				var err error
				if d, err = time.ParseDuration(p.Sleep); err != nil || d < 0 {
					return nil, hints.ParamErrorf("sleep", "%q is neither a duration nor forever", p.Sleep)
				}
			}
			actions := []hints.Action{{Type: "vendor.slow", Version: "1.0", Payload: hints.RawPayload([]byte(`{"slept":true}`))}}
			return hints.HintPolicyFunc(func(ctx context.Context, _ *hints.HintContext) ([]hints.Action, error) {
				if p.Sleep == "forever" {
					select {} // never returns, whatever its context says
				}
				time.Sleep(d)
				return actions, nil
			}), nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvhint-slow:", err)
		os.Exit(2)
	}
	os.Exit(app.Main(cat, os.Args[1:]))
}
