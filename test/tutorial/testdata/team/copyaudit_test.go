package copyaudit_test

import (
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/hintstest"

	copyaudit "example.com/copy-audit"
)

// TestConformance runs the kit in the build's catalog, where kv-fetch no
// longer runs by default under kvcr.
func TestConformance(t *testing.T) {
	cat := builtin.NewCatalog()
	if err := cat.SetDefaultHosts("kv-fetch"); err != nil {
		t.Fatal(err)
	}
	hintstest.Run(t, copyaudit.Provider(), hintstest.Suite{
		Catalog:   cat,
		Params:    []string{`{}`, `{"min_blocks": 8}`},
		BadParams: map[string]string{`{"min_blocks": 0}`: "min_blocks"},
	})
}

// TestNeedsRoomUnderKVCR: beside the built-in kv-fetch, the default-hosted
// KV copy sender is refused at registration, in words that say what to do.
func TestNeedsRoomUnderKVCR(t *testing.T) {
	err := builtin.NewCatalog().RegisterHint(copyaudit.Provider())
	if err == nil || !strings.Contains(err.Error(), "SetDefaultHosts") {
		t.Fatalf("RegisterHint beside kv-fetch: %v", err)
	}
	if err := copyaudit.Register(builtin.NewCatalog()); err != nil {
		t.Fatal(err)
	}
}
