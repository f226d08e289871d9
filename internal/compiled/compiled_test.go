package compiled

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

func graph(t *testing.T, doc string, modes hintsconfig.Modes) *hintsconfig.Graph {
	t.Helper()
	cfg := &hintsconfig.Config{}
	if doc != "" {
		var err error
		if cfg, err = hintsconfig.ParseConfig([]byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	g, probs := hintsconfig.Compile(builtin.NewCatalog(), cfg, modes)
	if probs.HasErrors() {
		t.Fatal(probs)
	}
	return g
}

// TestRoundTrip: what New and Data write, Decode reads back as it was:
// the same policy file, modes and selectors, and the same hash.
func TestRoundTrip(t *testing.T) {
	g := graph(t, "worker_selection:\n  decode: kvcr\n  encode: dynamo-round-robin\n",
		hintsconfig.Modes{Roles: map[string]hintsconfig.RouterMode{"encode": hintsconfig.ModeRoundRobin}})
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"component": "decode"}}
	c, err := New(g, map[string]*metav1.LabelSelector{"decode": sel, "prefill": sel})
	if err != nil {
		t.Fatal(err)
	}
	data, hash, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	wantRoles := "decode:\n  routerMode: kv\n  workerSelector:\n    matchLabels:\n      component: decode\nencode:\n  routerMode: round-robin\n"
	if diff := cmp.Diff(wantRoles, data[RolesKey]); diff != "" {
		t.Errorf("%s (-want +got):\n%s", RolesKey, diff)
	}
	dec, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if dec.Hash != hash || hash != Hash(data) {
		t.Errorf("hash %s, decoded %s", hash, dec.Hash)
	}
	if string(dec.Policy) != data[PolicyKey] {
		t.Errorf("policy file changed in the round trip")
	}
	if got := dec.Modes().For("encode"); got != hintsconfig.ModeRoundRobin {
		t.Errorf("encode mode %q", got)
	}
	if s, ok := dec.Selectors["decode"]; !ok || s.String() != "component=decode" {
		t.Errorf("decode selector %v", dec.Selectors)
	}
	if _, ok := dec.Selectors["encode"]; ok {
		t.Errorf("encode has no selector, yet one was decoded")
	}
}

// TestHashCoversBothKeys: a change of a role's pool or mode alone moves
// the hash, as a change of the policy file does.
func TestHashCoversBothKeys(t *testing.T) {
	base := map[string]string{PolicyKey: "worker_selection:\n  decode: kvcr\n", RolesKey: "decode:\n  routerMode: kv\n"}
	h := Hash(base)
	for name, data := range map[string]map[string]string{
		"selector": {PolicyKey: base[PolicyKey], RolesKey: "decode:\n  routerMode: kv\n  workerSelector: {matchLabels: {a: b}}\n"},
		"mode":     {PolicyKey: base[PolicyKey], RolesKey: "decode:\n  routerMode: random\n"},
		"policy":   {PolicyKey: "worker_selection:\n  decode: dynamo-random\n", RolesKey: base[RolesKey]},
		"no file":  {RolesKey: base[RolesKey]},
		// Bytes moved from one key to the other are another input.
		"shifted": {PolicyKey: base[PolicyKey] + "d", RolesKey: "ecode:\n  routerMode: kv\n"},
	} {
		if Hash(data) == h {
			t.Errorf("%s: the hash did not move", name)
		}
	}
	other := map[string]string{PolicyKey: base[PolicyKey], RolesKey: base[RolesKey], "notes.txt": "x"}
	if Hash(other) != h {
		t.Errorf("a key of someone else's moved the hash")
	}
}

// TestNoRole: a graph with no role compiles to role settings alone, no
// policy file (Dynamo's router refuses one with no role), and decodes as
// a config with no role.
func TestNoRole(t *testing.T) {
	c, err := New(graph(t, "", hintsconfig.Modes{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data[PolicyKey]; ok || data[RolesKey] != "{}\n" {
		t.Fatalf("data %q; want %s alone, empty", data, RolesKey)
	}
	dec, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if dec.Policy != nil || len(dec.Parsed.WorkerSelection) != 0 {
		t.Errorf("decoded %+v; want no role", dec)
	}
}

// TestDecodeRefuses: a config and its pools are one unit, so anything
// wrong in either key refuses the whole, with the reason named.
func TestDecodeRefuses(t *testing.T) {
	policy := "worker_selection:\n  decode: kvcr\n"
	tests := []struct {
		name  string
		data  map[string]string
		words string
	}{
		{"no role settings", map[string]string{PolicyKey: policy}, "no roles.yaml key"},
		{"role settings that do not parse", map[string]string{PolicyKey: policy, RolesKey: "decode: [\n"}, "roles.yaml"},
		{"an unknown key", map[string]string{PolicyKey: policy, RolesKey: "decode:\n  routerMode: kv\n  pool: x\n"}, `unknown field "pool"`},
		{"an unknown mode", map[string]string{PolicyKey: policy, RolesKey: "decode:\n  routerMode: fastest\n"}, `routerMode "fastest"`},
		{"a mode missing", map[string]string{PolicyKey: policy, RolesKey: "decode: {}\n"}, `routerMode ""`},
		{"an invalid selector", map[string]string{PolicyKey: policy, RolesKey: "decode:\n  routerMode: kv\n  workerSelector: {matchExpressions: [{key: a, operator: Near}]}\n"}, "workerSelector"},
		{"a role without settings", map[string]string{PolicyKey: "worker_selection:\n  decode: kvcr\n  prefill: kvcr\n", RolesKey: "decode:\n  routerMode: kv\n"}, "holds roles [decode, prefill] but roles.yaml has settings for [decode]"},
		{"settings without a role", map[string]string{RolesKey: "decode:\n  routerMode: kv\n"}, "holds roles [] but roles.yaml has settings for [decode]"},
		{"a policy file that does not parse", map[string]string{PolicyKey: "router_mode: kv\n", RolesKey: "{}\n"}, `unknown key "router_mode"`},
		{"an oversize role settings key", map[string]string{RolesKey: "#" + strings.Repeat("x", MaxRolesBytes)}, "over the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.data)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode: %v; want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.words) {
				t.Errorf("error %q does not say %q", err, tt.words)
			}
		})
	}
}

func TestSources(t *testing.T) {
	in := map[string]Source{"decode": {RouterRole: "rr", UID: "u1", Generation: 3}}
	got, err := Sources(map[string]string{SourcesAnnotation: EncodeSources(in)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	if _, err := Sources(map[string]string{SourcesAnnotation: "{"}); err == nil {
		t.Error("a broken annotation was read")
	}
}
