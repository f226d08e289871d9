package declared

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

const header = "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\n"

// TestLoadRefusesBadDeclarations: each bad declaration is refused with
// the place (path and line) and the words of what is wrong.
func TestLoadRefusesBadDeclarations(t *testing.T) {
	sel := "workerSelections:\n  - type: pick\n"
	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the error, the place included
	}{
		{"unknown field", header + sel + "hintz: []\n", []string{`unknown field "hintz"`}},
		{"wrong kind", "apiVersion: hints.kvrouter.io/v1alpha1\nkind: Catalog\n" + sel, []string{"line 2: kind: must be PolicyCatalog"}},
		{"no selections", header, []string{"workerSelections: declares no worker-selection type"}},
		{"dynamoVersion not a version", header + "dynamoVersion: latest\n" + sel, []string{`line 3: dynamoVersion: "latest" is not a Dynamo version; write its release line, such as 1.6 or 1.7.0`}},
		{"dynamoVersion a bare major", header + "dynamoVersion: \"1\"\n" + sel, []string{`line 3: dynamoVersion: "1" is not a Dynamo version`}},
		{"dynamoVersion a YAML number", header + "dynamoVersion: 1.10\n" + sel, []string{`line 3: dynamoVersion: 1.10 is a YAML number, which would read as "1.1"; quote the version: dynamoVersion: "1.10"`}},
		{"two documents", header + sel + "---\n" + header + sel, []string{"2 YAML documents"}},
		{"type name", header + "workerSelections:\n  - type: pick one\n", []string{"line 4: workerSelections[0].type:", "must be a policy type name"}},
		{"duplicate type", header + sel + "  - type: pick\n", []string{"workerSelections[1].type", "already registered"}},
		{"schema not an object", header + sel + "    parameters: {type: string}\n", []string{"line 5: workerSelections[0].parameters.type: must be object"}},
		{"preserve unknown fields", header + sel + "    parameters:\n      type: object\n      properties:\n        x:\n          type: object\n          x-kubernetes-preserve-unknown-fields: true\n",
			[]string{"line 10: workerSelections[0].parameters.properties.x.x-kubernetes-preserve-unknown-fields: not allowed"}},
		{"not structural", header + sel + "    parameters:\n      type: object\n      properties:\n        x: {minimum: 1}\n",
			[]string{"workerSelections[0].parameters.properties.x.type: Required value"}},
		{"bad default", header + sel + "    parameters:\n      type: object\n      properties:\n        x: {type: integer, maximum: 3, default: 5}\n",
			[]string{"workerSelections[0].parameters.properties.x.default", "less than or equal to 3"}},
		{"rule does not compile", header + sel + "    parameters:\n      type: object\n      properties:\n        x: {type: integer}\n      x-kubernetes-validations:\n        - rule: self.y > 1\n",
			[]string{"line 10: workerSelections[0].parameters.x-kubernetes-validations[0].rule", "compilation failed"}},
		{"commits does not compile", header + sel + "    commitsKVCopies: params.share > 0\n", []string{"line 5: workerSelections[0].commitsKVCopies: does not compile"}},
		{"commits fails on defaults", header + sel + "    parameters:\n      type: object\n      properties:\n        share: {type: number}\n    commitsKVCopies: params.share > 0\n",
			[]string{"line 9: workerSelections[0].commitsKVCopies: fails on the parameters' defaults alone: no such key: share; test a key that has no default with has(params.key)"}},
		{"commits not boolean", header + sel + "    parameters:\n      type: object\n      properties:\n        x: {type: integer}\n    commitsKVCopies: params.x + 1\n",
			[]string{"workerSelections[0].commitsKVCopies: must be a boolean expression"}},
		{"commits too costly", header + sel + "    parameters:\n      type: object\n      properties:\n        xs: {type: array, items: {type: string}}\n    commitsKVCopies: params.xs.all(a, params.xs.all(b, params.xs.all(c, a + b + c != '')))\n",
			[]string{"workerSelections[0].commitsKVCopies: the expression's estimated cost", "exceeds the limit"}},
		{"unknown commitment", header + sel + "hints:\n  - type: fetch\n    commitments: [KV_MOVE]\n", []string{"line 7: hints[0].commitments[0]", `"KV_MOVE" is not a commitment; known: KVCopy`}},
		{"unknown default host", header + sel + "hints:\n  - type: fetch\n    defaultHosts: [kvcr]\n", []string{"line 7: hints[0].defaultHosts[0]", `"kvcr" is not a worker-selection type of this declaration; declared: pick`}},
		{"default needs parameters", header + sel + "hints:\n  - type: fetch\n    defaultHosts: ['*']\n    parameters:\n      type: object\n      required: [count]\n      properties:\n        count: {type: integer}\n",
			[]string{"hints[0]:", "refuses no parameters", `parameter "count": is required`}},
		{"two default senders", header + sel + "hints:\n  - type: fetch\n    commitments: [KVCopy]\n    defaultHosts: [pick]\n  - type: prefetch\n    commitments: [KVCopy]\n    defaultHosts: ['*']\n",
			[]string{"line 9: hints[1]:", `"fetch" already sends the committed KV copy by default`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc))
			if err == nil {
				t.Fatal("loaded; want an error")
			}
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Errorf("error is %T, want *Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestDeclaredHintsNeverRun: a declared hint policy parses its parameters
// but refuses to build hints, and the linked catalog, which is what the
// sidecar runs, does not know a declared-only type.
func TestDeclaredHintsNeverRun(t *testing.T) {
	cat := loadFile(t, "testdata/custom-router.yaml").Catalog
	p, ok := cat.Hint("harness_prefetch")
	if !ok {
		t.Fatal("harness_prefetch not declared")
	}
	policy, err := p.Parse(hints.Params(`{"max_blocks": 64}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.BuildHints(context.Background(), &hints.HintContext{}); !errors.Is(err, ErrDeclaredOnly) {
		t.Errorf("BuildHints: %v, want ErrDeclaredOnly", err)
	}

	doc := "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: [{type: harness_prefetch}]\n"
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if _, probs := hintsconfig.Compile(cat, cfg, hintsconfig.Modes{}); probs.HasErrors() {
		t.Fatalf("declared catalog refuses: %v", probs)
	}
	cfg, _ = hintsconfig.ParseConfig([]byte(doc))
	_, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, hintsconfig.Modes{})
	if len(probs) != 1 || probs[0].Reason != hintsconfig.ReasonUnknownHintType {
		t.Fatalf("linked catalog: %v, want one UnknownHintType", probs)
	}
}

// TestDeclaredRules: a declared Rust-only type is checked with its schema
// and the catalog rules, with the reasons linked plugins get.
func TestDeclaredRules(t *testing.T) {
	cat := loadFile(t, "testdata/custom-router.yaml").Catalog
	for _, tc := range []struct {
		name, doc string
		reason    hintsconfig.Reason
		key, msg  string
	}{
		{"valid", "worker_selection:\n  decode:\n    type: kv-share\n    parameters: {shared_cache_multiplier: 0.5}\n    hints: [{type: harness_prefetch, parameters: {max_blocks: 64}}]\n", "", "", ""},
		{"defaults", "worker_selection:\n  decode: {type: kv-share}\n", "", "", ""},
		{"unknown parameter", "worker_selection:\n  decode:\n    type: kv-share\n    hints: [{type: harness_prefetch, parameters: {max_block: 64}}]\n",
			hintsconfig.ReasonInvalidParameters, "max_block", `parameter "max_block": unknown parameter; known: max_blocks, source`},
		{"wrong type", "worker_selection:\n  decode:\n    type: kv-share\n    hints: [{type: harness_prefetch, parameters: {max_blocks: many}}]\n",
			hintsconfig.ReasonInvalidParameters, "max_blocks", `parameter "max_blocks": "many" is not an integer`},
		{"an integer wider than 64 bits, as written", "worker_selection:\n  decode:\n    type: kv-share\n    hints: [{type: harness_prefetch, parameters: {max_blocks: 99999999999999999999}}]\n",
			hintsconfig.ReasonInvalidParameters, "max_blocks", `parameter "max_blocks": 99999999999999999999 is out of range 1..4096`},
		{"out of range", "worker_selection:\n  decode:\n    type: kv-share\n    parameters: {shared_cache_multiplier: 1.5}\n",
			hintsconfig.ReasonInvalidParameters, "shared_cache_multiplier", `worker-selection kv-share: parameter "shared_cache_multiplier": 1.5 is out of range 0..1`},
		{"enum", "worker_selection:\n  decode:\n    type: kv-share\n    hints: [{type: harness_prefetch, parameters: {source: disk}}]\n",
			hintsconfig.ReasonInvalidParameters, "source", `parameter "source": Unsupported value: "disk": supported values: "host", "peer"`},
		{"two senders", "worker_selection:\n  decode:\n    type: kv-share\n    hints: [{type: harness_prefetch}, {type: peer-pull}]\n",
			hintsconfig.ReasonKVCopySenderDuplicate, "", "worker-selection kv-share commits KV copies, and 2 hint policies send them (harness_prefetch, peer-pull); keep exactly one"},
		{"no sender", "worker_selection:\n  decode:\n    type: kv-share\n    hints: []\n",
			hintsconfig.ReasonKVCopySenderMissing, "", "worker-selection kv-share commits KV copies, but no hint policy sends them; list exactly one KVCopy hint policy (harness_prefetch, peer-pull)"},
		{"commits off", "worker_selection:\n  decode:\n    type: kv-share\n    parameters: {shared_cache_multiplier: 0}\n    hints: []\n", "", "", ""},
		{"unknown type", "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: [{type: kv-fetch}]\n",
			hintsconfig.ReasonUnknownHintType, "", `hint policy type "kv-fetch" is not linked into this build; linked types: harness_prefetch, peer-pull`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := hintsconfig.ParseConfig([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			_, probs := hintsconfig.Compile(cat, cfg, hintsconfig.Modes{})
			errs := probs.Errors()
			if tc.reason == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("problems %v, want one %s", probs, tc.reason)
			}
			if errs[0].Reason != tc.reason || errs[0].Key != tc.key || !strings.HasPrefix(errs[0].Message, tc.msg) {
				t.Errorf("got %s key %q: %s\nwant %s key %q: %s", errs[0].Reason, errs[0].Key, errs[0].Message, tc.reason, tc.key, tc.msg)
			}
		})
	}
}

// TestLoadBoundsHostileText: a declaration comes from a ConfigMap anyone
// with write access to the namespace may edit, so what it costs to load is
// bounded: an alias bomb is refused by the YAML readers, and text over
// MaxDocumentBytes is refused before it is read.
func TestLoadBoundsHostileText(t *testing.T) {
	bomb := header + "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		bomb += n + ": &" + n + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = n
	}
	if _, err := Load([]byte(bomb)); err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Errorf("an alias bomb: %v; want it refused for excessive aliasing", err)
	}
	big := header + "# " + strings.Repeat("x", MaxDocumentBytes) + "\n"
	if _, err := Load([]byte(big)); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a declaration over %d bytes: %v", MaxDocumentBytes, err)
	}
}

// TestDynamoVersion: a declaration's dynamoVersion is kept as written,
// empty when it does not say.
func TestDynamoVersion(t *testing.T) {
	sel := "workerSelections:\n  - type: pick\n"
	for _, tc := range []struct{ doc, want string }{
		{header + sel, ""},
		{header + "dynamoVersion: \"1.7\"\n" + sel, "1.7"},
		{header + "dynamoVersion: v1.7.0-rc1\n" + sel, "v1.7.0-rc1"},
	} {
		c, err := Load([]byte(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if c.DynamoVersion != tc.want {
			t.Errorf("dynamoVersion %q, want %q", c.DynamoVersion, tc.want)
		}
	}
}
