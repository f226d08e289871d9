package compiled

import (
	"errors"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestReleasedFormRoundTrip: a config in the released form with no
// kv_hint_policy reads, as text, like a per-role file whose roles run the
// defaults of their selections; the form key beside it keeps its meaning
// (no role runs a hint policy), is part of the hash, and a form the key
// does not know is refused.
func TestReleasedFormRoundTrip(t *testing.T) {
	g := graph(t, "worker_selection:\n  aggregated: {type: dynamo-random, hints: []}\n", hintsconfig.Modes{})
	g.Form = hintsconfig.FormRouterWideHint
	c, err := New(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, hash, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if data[FormKey] != string(hintsconfig.FormRouterWideHint) {
		t.Fatalf("data %v has no form key", data)
	}
	d, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if d.Form != hintsconfig.FormRouterWideHint || d.Hash != hash {
		t.Errorf("decoded form %q hash %s, want %s %s", d.Form, d.Hash, hintsconfig.FormRouterWideHint, hash)
	}
	if e := d.Parsed.EntryUnder("aggregated", hintsconfig.ModeKV); e == nil || e.Hints == nil || len(*e.Hints) != 0 {
		t.Errorf("aggregated runs %v; want no hint policy", e)
	}
	// Without the key the same file reads as per-role, and the role
	// runs its selection's defaults: the key is what keeps it apart.
	withoutKey := map[string]string{PolicyKey: data[PolicyKey], RolesKey: data[RolesKey]}
	if Hash(withoutKey) == hash {
		t.Error("the form key is not part of the hash")
	}
	per, err := Decode(withoutKey)
	if err != nil {
		t.Fatal(err)
	}
	if e := per.Parsed.EntryUnder("aggregated", hintsconfig.ModeKV); e.Hints != nil {
		t.Errorf("read without the key, the entry lists hints %v; want the defaults (nil)", *e.Hints)
	}
	bad := map[string]string{PolicyKey: data[PolicyKey], RolesKey: data[RolesKey], FormKey: "Docs"}
	if _, err := Decode(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("form %q: %v; want ErrMalformed", "Docs", err)
	}
}
