// Package builtin holds the hint and worker-selection policies that every
// kvhint build links: kv-fetch, kv-retain, kv-evict, dynamo-default-cost-fn,
// kvcr and the load-only selections.
package builtin

import (
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// Hint policy types.
const (
	TypeKVFetch  = "kv-fetch"
	TypeKVRetain = "kv-retain"
	TypeKVEvict  = "kv-evict"
)

// Worker-selection policy types.
const (
	TypeDefaultCostFn = "dynamo-default-cost-fn"
	TypeKVCR          = "kvcr"
)

// Register adds the built-in policies to cat. Hint policies are registered in
// the order their defaults run: fetch, retain, evict.
func Register(cat *hints.Catalog) error {
	for _, p := range []hints.SelectionProvider{costFnProvider(), kvcrProvider()} {
		if err := cat.RegisterSelection(p); err != nil {
			return err
		}
	}
	for _, p := range loadOnlyProviders() {
		if err := cat.RegisterSelection(p); err != nil {
			return err
		}
	}
	for _, p := range []hints.HintProvider{kvFetchProvider(), kvRetainProvider(), kvEvictProvider()} {
		if err := cat.RegisterHint(p); err != nil {
			return err
		}
	}
	return nil
}

// NewCatalog returns a catalog holding the built-in policies, ready for a
// custom build to register more.
func NewCatalog() *hints.Catalog {
	cat := hints.NewCatalog()
	if err := Register(cat); err != nil {
		panic(fmt.Sprintf("builtin: %v", err))
	}
	return cat
}

// staticAction builds a precomputed action list that a policy returns as it is
// on every booking; the dispatcher never modifies what policies return.
func staticAction(typ, version string, write func(w *hints.ObjectWriter)) []hints.Action {
	var w hints.ObjectWriter
	write(&w)
	p, err := w.Payload()
	if err != nil {
		panic(fmt.Sprintf("builtin: %s payload: %v", typ, err))
	}
	return []hints.Action{{Type: typ, Version: version, Payload: p}}
}
