package hintsconfig_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// problemKey is what a rule test pins down: the rule (reason), where, and the
// parameter key. Messages are checked separately for the words a person needs.
type problemKey struct {
	Severity hintsconfig.Severity
	Reason   hintsconfig.Reason
	Role     string
	Hint     int
	Key      string
}

func keys(ps hintsconfig.Problems) []problemKey {
	out := []problemKey{}
	for _, p := range ps {
		out = append(out, problemKey{p.Severity, p.Reason, p.Role, p.Hint, p.Key})
	}
	return out
}

func mustParse(t *testing.T, doc string) *hintsconfig.Config {
	t.Helper()
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfg
}

func TestCompileRules(t *testing.T) {
	E, W := hintsconfig.SeverityError, hintsconfig.SeverityWarning
	tests := []struct {
		name     string
		doc      string
		want     []problemKey
		roles    []string            // roles the graph keeps
		hints    map[string][]string // role -> hint IDs that run
		msgWords []string            // words the first problem's message must contain
		modes    hintsconfig.Modes   // the router modes; zero: every role on kv
	}{
		{
			name:  "bare entry runs the defaults of its selection",
			doc:   "worker_selection:\n  prefill: dynamo-default-cost-fn\n",
			roles: []string{"prefill"},
			hints: map[string][]string{"prefill": {"kv-evict"}},
		},
		{
			name:  "kvcr defaults: fetch then evict, in catalog order",
			doc:   "worker_selection:\n  decode: kvcr\n",
			roles: []string{"decode"},
			hints: map[string][]string{"decode": {"kv-fetch", "kv-evict"}},
		},
		{
			name:  "empty list runs none, even where a selection commits copies is not exempt",
			doc:   "worker_selection:\n  decode: {type: kvcr, hints: []}\n",
			want:  []problemKey{{E, hintsconfig.ReasonKVCopySenderMissing, "decode", hintsconfig.NoHint, ""}},
			roles: []string{},
		},
		{
			name:  "empty list under a selection that commits nothing",
			doc:   "worker_selection:\n  prefill: {type: dynamo-default-cost-fn, hints: []}\n",
			roles: []string{"prefill"},
			hints: map[string][]string{"prefill": nil},
		},
		{
			name:     "rule 1: unknown worker selection lists the linked types",
			doc:      "worker_selection:\n  decode: nope\n",
			want:     []problemKey{{E, hintsconfig.ReasonUnknownWorkerSelection, "decode", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{`"nope"`, "kvcr", "dynamo-default-cost-fn", "dynamo-round-robin", "dynamo-two-tier-cost-fn"},
		},
		{
			name:     "rule 1: unknown hint type lists the linked types",
			doc:      "worker_selection:\n  prefill: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}, {type: kv-teleport}]}\n",
			want:     []problemKey{{E, hintsconfig.ReasonUnknownHintType, "prefill", 1, ""}},
			roles:    []string{},
			msgWords: []string{`"kv-teleport"`, "kv-evict, kv-fetch, kv-retain"},
		},
		{
			name:     "rule 2: hint parameter out of range names role, index, key and range",
			doc:      "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-retain, parameters: {ttl_seconds: 0}}]}\n",
			want:     []problemKey{{E, hintsconfig.ReasonInvalidParameters, "decode", 0, "ttl_seconds"}},
			roles:    []string{},
			msgWords: []string{"ttl_seconds", "0", "1..86400"},
		},
		{
			name:     "rule 2: selection parameter of the wrong type",
			doc:      "worker_selection:\n  decode: {type: kvcr, parameters: {shared_cache_multiplier: lots}}\n",
			want:     []problemKey{{E, hintsconfig.ReasonInvalidParameters, "decode", hintsconfig.NoHint, "shared_cache_multiplier"}},
			roles:    []string{},
			msgWords: []string{"shared_cache_multiplier", `"lots"`, "a number"},
		},
		{
			name:     "rule 2: unknown parameter key",
			doc:      "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict, parameters: {when: now}}]}\n",
			want:     []problemKey{{E, hintsconfig.ReasonInvalidParameters, "decode", 0, "when"}},
			roles:    []string{},
			msgWords: []string{`"when"`, "takes no parameters"},
		},
		{
			name: "rule 3: a repeated type needs distinct names",
			doc: `worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints: [{type: kv-retain}, {type: kv-retain}]
`,
			want:     []problemKey{{E, hintsconfig.ReasonDuplicateHintName, "decode", 1, ""}},
			roles:    []string{},
			msgWords: []string{"kv-retain", "hint 0", "distinct name"},
		},
		{
			name: "rule 3: a repeated type with distinct names is fine",
			doc: `worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: kv-retain, parameters: {ttl_seconds: 600}}
      - {type: kv-retain, name: retain-long, parameters: {ttl_seconds: 3600}}
`,
			roles: []string{"decode"},
			hints: map[string][]string{"decode": {"kv-retain", "retain-long"}},
		},
		{
			name: "rule 3: names are unique within a role, across types",
			doc: `worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints: [{type: kv-retain, name: keep}, {type: kv-evict, name: keep}]
`,
			want:     []problemKey{{E, hintsconfig.ReasonDuplicateHintName, "decode", 1, ""}},
			roles:    []string{},
			msgWords: []string{`"keep"`, "hint 0"},
		},
		{
			name:  "rule 3: a name may equal a type used elsewhere only once",
			doc:   "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}, {type: kv-retain, name: kv-evict}]}\n",
			want:  []problemKey{{E, hintsconfig.ReasonDuplicateHintName, "decode", 1, ""}},
			roles: []string{},
		},
		{
			name:  "hint names must be DNS labels",
			doc:   "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict, name: Evict_Now}]}\n",
			want:  []problemKey{{E, hintsconfig.ReasonInvalidHintName, "decode", 0, ""}},
			roles: []string{},
		},
		{
			name:     "rule 5: hints listed under a non-KV mode fail, naming the flag",
			doc:      "worker_selection:\n  encode: {type: dynamo-round-robin, hints: [{type: kv-evict}]}\n",
			modes:    hintsconfig.Modes{Default: hintsconfig.ModeRoundRobin, Flag: "--router-mode"},
			want:     []problemKey{{E, hintsconfig.ReasonHintsRequireKVMode, "encode", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{`--router-mode is "round-robin"`, "KV path"},
		},
		{
			name:  "rule 5: no defaults run off the KV path",
			doc:   "worker_selection:\n  encode: {type: dynamo-default-cost-fn}\n",
			modes: hintsconfig.Modes{Default: hintsconfig.ModeRandom},
			roles: []string{"encode"},
			hints: map[string][]string{"encode": nil},
		},
		{
			name:  "rule 5: a role's own kv mode overrides a non-KV default",
			doc:   "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-evict}]}\n  encode: dynamo-random\n",
			modes: hintsconfig.Modes{Default: hintsconfig.ModeRandom, Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeKV}},
			roles: []string{"decode", "encode"},
			hints: map[string][]string{"decode": {"kv-evict"}, "encode": nil},
		},
		{
			name:     "rule 6: a committing selection needs a sender",
			doc:      "worker_selection:\n  decode: {type: kvcr, hints: [{type: kv-retain}]}\n",
			want:     []problemKey{{E, hintsconfig.ReasonKVCopySenderMissing, "decode", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{"kvcr", "kv-fetch"},
		},
		{
			name: "rule 6: two senders fail",
			doc: `worker_selection:
  decode:
    type: kvcr
    hints: [{type: kv-fetch}, {type: kv-fetch, name: fetch-again, parameters: {min_blocks: 4}}]
`,
			want:     []problemKey{{E, hintsconfig.ReasonKVCopySenderDuplicate, "decode", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{"kv-fetch, fetch-again"},
		},
		{
			name:  "rule 6: kvcr with shared_cache_multiplier 0 commits nothing: a sender is a warning",
			doc:   "worker_selection:\n  decode: {type: kvcr, parameters: {shared_cache_multiplier: 0}}\n",
			want:  []problemKey{{W, hintsconfig.ReasonKVCopySenderUnused, "decode", hintsconfig.NoHint, ""}},
			roles: []string{"decode"},
			hints: map[string][]string{"decode": {"kv-fetch", "kv-evict"}},
		},
		{
			name:  "rule 6: kvcr with shared_cache_multiplier 0 and no sender is fine",
			doc:   "worker_selection:\n  decode: {type: kvcr, parameters: {shared_cache_multiplier: 0}, hints: []}\n",
			roles: []string{"decode"},
			hints: map[string][]string{"decode": nil},
		},
		{
			name:  "rule 6 does not apply off the KV path",
			doc:   "worker_selection:\n  decode: {type: kvcr, hints: []}\n",
			modes: hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeDirect}},
			roles: []string{"decode"},
			hints: map[string][]string{"decode": nil},
		},
		{
			name:     "invalid router mode",
			doc:      "worker_selection:\n  decode: kvcr\n",
			modes:    hintsconfig.Modes{Default: "fastest", Flag: "--router-mode"},
			want:     []problemKey{{E, hintsconfig.ReasonInvalidRouterMode, "decode", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{`--router-mode "fastest"`, "device-aware-weighted"},
		},
		{
			name:  "device-aware-weighted is a router mode, off the KV path",
			doc:   "worker_selection:\n  decode: dynamo-device-aware-weighted\n",
			modes: hintsconfig.Modes{Default: hintsconfig.ModeDeviceAwareWeighted},
			roles: []string{"decode"},
			hints: map[string][]string{"decode": nil},
		},
		{
			name:     "a role is one of Dynamo's worker types",
			doc:      "worker_selection:\n  chat: dynamo-default-cost-fn\n  encode: dynamo-default-cost-fn\n",
			want:     []problemKey{{E, hintsconfig.ReasonInvalidRole, "chat", hintsconfig.NoHint, ""}},
			roles:    []string{"encode"},
			msgWords: []string{`"chat"`, "aggregated, prefill, decode, encode"},
		},
		{
			name:  "a bare entry that names an instance runs that instance",
			doc:   "worker_selection:\n  aggregated: rr\n  decode: {type: kvcr, hints: []}\n  instances:\n  - {name: rr, type: dynamo-round-robin}\n",
			want:  []problemKey{{E, hintsconfig.ReasonKVCopySenderMissing, "decode", hintsconfig.NoHint, ""}},
			roles: []string{"aggregated"},
			hints: map[string][]string{"aggregated": {"kv-evict"}},
		},
		{
			name:     "an instance's parameters are its type's: seed under dynamo-round-robin is refused",
			doc:      "worker_selection:\n  aggregated: rr\n  instances:\n    - name: rr\n      type: dynamo-round-robin\n      parameters:\n        seed: 7\n",
			want:     []problemKey{{E, hintsconfig.ReasonInvalidParameters, "aggregated", hintsconfig.NoHint, "seed"}},
			roles:    []string{},
			msgWords: []string{"seed"},
		},
		{
			name:     "an instance of a type not linked",
			doc:      "worker_selection:\n  aggregated: sita\n  instances: [{name: sita, type: dynamo-sita-cost-fn}]\n",
			want:     []problemKey{{E, hintsconfig.ReasonUnknownWorkerSelection, "aggregated", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{`instance "sita" has worker-selection type "dynamo-sita-cost-fn", which is not linked`},
		},
		{
			name:  "default is the router's built-in selector",
			doc:   "worker_selection:\n  prefill: default\n",
			roles: []string{"prefill"},
			hints: map[string][]string{"prefill": {"kv-evict"}},
		},
		{
			name:     "a bare entry that is neither an instance nor a type",
			doc:      "worker_selection:\n  encode: missing\n  instances: [{name: rr, type: dynamo-round-robin}]\n",
			want:     []problemKey{{E, hintsconfig.ReasonUnknownWorkerSelection, "encode", hintsconfig.NoHint, ""}},
			roles:    []string{},
			msgWords: []string{`"missing"`, "instance", "dynamo-round-robin"},
		},
		{
			name: "every problem is reported, and valid roles are kept",
			doc: `worker_selection:
  prefill: dynamo-default-cost-fn
  decode:
    type: kvcr
    hints: [{type: kv-fetch}, {type: kv-fetch}, {type: nope}, {type: kv-retain, parameters: {priority: 101}}]
`,
			modes: hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"decode": hintsconfig.ModeRandom}},
			want: []problemKey{
				{E, hintsconfig.ReasonHintsRequireKVMode, "decode", hintsconfig.NoHint, ""},
				{E, hintsconfig.ReasonDuplicateHintName, "decode", 1, ""},
				{E, hintsconfig.ReasonUnknownHintType, "decode", 2, ""},
				{E, hintsconfig.ReasonInvalidParameters, "decode", 3, "priority"},
			},
			roles: []string{"prefill"},
			hints: map[string][]string{"prefill": {"kv-evict"}},
		},
	}
	cat := builtin.NewCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, probs := hintsconfig.Compile(cat, mustParse(t, tt.doc), tt.modes)
			want := tt.want
			if want == nil {
				want = []problemKey{}
			}
			if diff := cmp.Diff(want, keys(probs)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%v", diff, probs)
			}
			var roles []string
			gotHints := map[string][]string{}
			for _, r := range g.Roles {
				roles = append(roles, r.Name)
				var ids []string
				for _, h := range r.Hints {
					ids = append(ids, h.ID())
				}
				gotHints[r.Name] = ids
			}
			if roles == nil {
				roles = []string{}
			}
			if diff := cmp.Diff(tt.roles, roles); diff != "" {
				t.Errorf("roles kept (-want +got):\n%s", diff)
			}
			if tt.hints != nil {
				if diff := cmp.Diff(tt.hints, gotHints); diff != "" {
					t.Errorf("hints that run (-want +got):\n%s", diff)
				}
			}
			if len(tt.msgWords) > 0 {
				if len(probs) == 0 {
					t.Fatalf("no problem to read words from")
				}
				for _, w := range tt.msgWords {
					if !strings.Contains(probs[0].Message, w) {
						t.Errorf("message %q does not mention %q", probs[0].Message, w)
					}
				}
			}
		})
	}
}

func TestCompileTooManyHints(t *testing.T) {
	var b strings.Builder
	b.WriteString("worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n")
	for i := 0; i <= hintsconfig.MaxHintsPerRole; i++ {
		b.WriteString("      - {type: kv-retain, name: r")
		b.WriteString(strings.Repeat("x", i+1))
		b.WriteString("}\n")
	}
	_, probs := hintsconfig.Compile(builtin.NewCatalog(), mustParse(t, b.String()), hintsconfig.Modes{})
	want := []problemKey{{hintsconfig.SeverityError, hintsconfig.ReasonTooManyHints, "decode", hintsconfig.NoHint, ""}}
	if diff := cmp.Diff(want, keys(probs)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestCompileKVCopyIsGatedByCommitments(t *testing.T) {
	cat := builtin.NewCatalog()
	var seen []bool
	record := func(hc *hints.HintContext) { seen = append(seen, hc.CommittedKVCopy() != nil) }
	for _, p := range []hints.HintProvider{
		{Type: "peek-declared", Commitments: hints.KVCopy, Parse: func(hints.Params) (hints.HintPolicy, error) {
			return peek(record), nil
		}},
		{Type: "peek-undeclared", Parse: func(hints.Params) (hints.HintPolicy, error) { return peek(record), nil }},
	} {
		if err := cat.RegisterHint(p); err != nil {
			t.Fatal(err)
		}
	}
	g, probs := hintsconfig.Compile(cat, mustParse(t, "worker_selection:\n  decode: {type: kvcr, hints: [{type: peek-undeclared}, {type: peek-declared}, {type: peek-undeclared, name: again}]}\n"), hintsconfig.Modes{})
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	role, _ := g.Role("decode")
	b := hintstest.Booking{RequestID: "r1", KVCopy: &hints.CommittedCopy{SourceWorker: "w2", BlockHashes: []uint64{1}}}
	for _, h := range role.Hints {
		if _, err := hintstest.BuildHints(t.Context(), h.Policy, h.Commitments, b); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]bool{false, true, false}, seen); diff != "" {
		t.Errorf("which policies saw the copy (-want +got):\n%s", diff)
	}
}

func peek(f func(*hints.HintContext)) hints.HintPolicy {
	return hints.HintPolicyFunc(func(_ context.Context, hc *hints.HintContext) ([]hints.Action, error) {
		f(hc)
		return nil, nil
	})
}

func TestCompileProviderPanicIsAnError(t *testing.T) {
	cat := builtin.NewCatalog()
	if err := cat.RegisterHint(hints.HintProvider{Type: "fragile", Parse: func(hints.Params) (hints.HintPolicy, error) {
		panic("boom")
	}}); err != nil {
		t.Fatal(err)
	}
	_, probs := hintsconfig.Compile(cat, mustParse(t, "worker_selection:\n  decode: {type: dynamo-default-cost-fn, hints: [{type: fragile}]}\n"), hintsconfig.Modes{})
	if len(probs) != 1 || probs[0].Reason != hintsconfig.ReasonInvalidParameters || !strings.Contains(probs[0].Message, "panicked") {
		t.Fatalf("want one InvalidParameters problem about a panic, got %v", probs)
	}
}

// TestCompileDefaultsSayWhereTheyCameFrom: a problem of a role that runs its
// selection's defaults says the policies came from the defaults and how to
// list hints instead; a build that took kv-fetch out of kvcr's defaults
// (Catalog.SetDefaultHosts) makes a bare kvcr role miss its sender.
func TestCompileDefaultsSayWhereTheyCameFrom(t *testing.T) {
	cat := builtin.NewCatalog()
	if err := cat.SetDefaultHosts(builtin.TypeKVFetch); err != nil {
		t.Fatal(err)
	}
	_, probs := hintsconfig.Compile(cat, mustParse(t, "worker_selection:\n  decode: kvcr\n"), hintsconfig.Modes{})
	if len(probs) != 1 || probs[0].Reason != hintsconfig.ReasonKVCopySenderMissing {
		t.Fatalf("problems: %v; want one KVCopySenderMissing", probs)
	}
	for _, want := range []string{"came from the defaults of worker-selection kvcr, since the role lists no hints", "list the role's hints instead, e.g. hints: [{type: kv-evict}]"} {
		if !strings.Contains(probs[0].Message, want) {
			t.Errorf("message %q lacks %q", probs[0].Message, want)
		}
	}
	// A role that lists its hints is told nothing about defaults.
	_, probs = hintsconfig.Compile(cat, mustParse(t, "worker_selection:\n  decode: {type: kvcr, hints: [{type: kv-evict}]}\n"), hintsconfig.Modes{})
	if len(probs) != 1 || strings.Contains(probs[0].Message, "defaults") {
		t.Errorf("problems of a listed role: %v", probs)
	}
}
