package kvoffload_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	"github.com/google/go-cmp/cmp"

	kvoffload "example.com/kv-offload"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
)

func compile(t *testing.T, cat *hints.Catalog, doc string) (*hintsconfig.Graph, hintsconfig.Problems) {
	t.Helper()
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	// Every role on the KV path, as a router started with --router-mode kv.
	return hintsconfig.Compile(cat, cfg, hintsconfig.Modes{Default: hintsconfig.ModeKV})
}

func TestCustomTypeValidatesAndRuns(t *testing.T) {
	cat := builtin.NewCatalog()
	if err := kvoffload.Register(cat); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("testdata/offload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g, probs := compile(t, cat, string(doc))
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	role, _ := g.Role("decode")
	b := hintstest.Booking{RequestID: "r1", Role: "decode", Worker: "w1", PromptTokens: 9000, BlockSize: 16,
		Session: hints.Session{ID: "s1", Turn: 2}}
	var got []string
	for _, h := range role.Hints {
		actions, err := hintstest.BuildHints(t.Context(), h.Policy, h.Commitments, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range actions {
			got = append(got, a.Type+" "+string(a.Payload.Bytes()))
		}
	}
	want := []string{
		`kv.retain {"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":120.0}`,
		`kv.offload {"execute_at":"request_completion","include_current_request":true,"tier":"disk"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

func TestCustomParametersAreChecked(t *testing.T) {
	cat := builtin.NewCatalog()
	if err := kvoffload.Register(cat); err != nil {
		t.Fatal(err)
	}
	_, probs := compile(t, cat, "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-offload, parameters: {tier: tape}}]}\n")
	if len(probs) != 1 || probs[0].Reason != hintsconfig.ReasonInvalidParameters || probs[0].Key != "tier" || probs[0].Hint != 0 {
		t.Fatalf("want one InvalidParameters on tier of hint 0, got %v", probs)
	}
}

func TestStockBuildDoesNotKnowTheType(t *testing.T) {
	_, probs := compile(t, builtin.NewCatalog(), "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-offload}]}\n")
	if len(probs) != 1 || probs[0].Reason != hintsconfig.ReasonUnknownHintType {
		t.Fatalf("want UnknownHintType, got %v", probs)
	}
}

// TestCustomBinary builds this module's kvhint and checks that the linked
// type validates and compiles through the real command line, as a team's
// CI would run it.
func TestCustomBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "kvhint")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kvhint")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "validate", "-f", "testdata/offload.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 file(s) valid") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "compile", "-f", "testdata/offload.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "tier: disk") {
		t.Fatalf("compile: %v\n%s", err, out)
	}
}

// TestConformance runs the kit every plugin runs: strict parameters,
// well-formed payloads within the engine rules, determinism, concurrent
// use, nothing kept after return.
func TestConformance(t *testing.T) {
	hintstest.Run(t, kvoffload.Provider(), hintstest.Suite{
		Params: []string{`{}`, `{"tier": "disk", "min_prompt_tokens": 0}`},
		BadParams: map[string]string{
			`{"tier": "tape"}`:           "tier",
			`{"min_prompt_tokens": -1}`:  "min_prompt_tokens",
			`{"min_prompt_tokens": 1.5}`: "min_prompt_tokens",
		},
	})
}

// TestBookingThroughTheDispatcher books a worker through the public
// dispatch core with kv-offload linked, as an in-process Go router would,
// and checks the hint's exact bytes.
func TestBookingThroughTheDispatcher(t *testing.T) {
	cat := builtin.NewCatalog()
	if err := kvoffload.Register(cat); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("testdata/offload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: cat, Workers: dispatch.StaticWorkers{"decode-0": true, "decode-1": false}})
	if err := d.Load(doc, "testdata/offload.yaml"); err != nil {
		t.Fatal(err)
	}
	b := &dispatch.Booking{RequestID: "r1", Role: "decode", Worker: "decode-0", PromptTokens: 9000, BlockSize: 16,
		Session: hints.Session{ID: "s1", Turn: 2}}
	h, err := d.Build(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"protocol_version":"0.1","message_id":"r1","actions":[` +
		`{"action_id":"a1","action_type":"kv.retain","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":120.0}},` +
		`{"action_id":"a2","action_type":"kv.offload","action_version":"1.0","payload":{"execute_at":"request_completion","include_current_request":true,"tier":"disk"}}]}`
	if h.Outcome != dispatch.OutcomeHinted || string(h.Message) != want {
		t.Fatalf("outcome %v, message\n%s\nwant\n%s", h.Outcome, h.Message, want)
	}
	b.Worker = "decode-1"
	if h, err := d.Build(t.Context(), b); err != nil || h.Outcome != dispatch.OutcomeNotHintCapable || h.Message != nil {
		t.Fatalf("worker without router_hint: %v, %v, %s", err, h.Outcome, h.Message)
	}
}
