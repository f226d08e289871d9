package hints

import (
	"fmt"
	"slices"
	"sort"
)

// Catalog holds the hint and worker-selection policy types linked into a
// build. Registration happens at start-up; after that a Catalog is read-only
// and safe for concurrent use.
type Catalog struct {
	hints      []*HintProvider
	hintByType map[string]*HintProvider
	sels       []*SelectionProvider
	selByType  map[string]*SelectionProvider
}

// NewCatalog returns an empty catalog.
func NewCatalog() *Catalog {
	return &Catalog{
		hintByType: map[string]*HintProvider{},
		selByType:  map[string]*SelectionProvider{},
	}
}

// RegisterHint adds a hint policy type. A duplicate type name is an error.
// Registration order is the order default hints run in.
func (c *Catalog) RegisterHint(p HintProvider) error {
	if err := p.check(); err != nil {
		return err
	}
	if _, dup := c.hintByType[p.Type]; dup {
		return fmt.Errorf("hint policy type %q is already registered", p.Type)
	}
	p.DefaultHosts = slices.Clone(p.DefaultHosts)
	c.hints = append(c.hints, &p)
	c.hintByType[p.Type] = &p
	return nil
}

// RegisterSelection adds a worker-selection policy type. A duplicate type
// name is an error.
func (c *Catalog) RegisterSelection(p SelectionProvider) error {
	if err := p.check(); err != nil {
		return err
	}
	if _, dup := c.selByType[p.Type]; dup {
		return fmt.Errorf("worker-selection type %q is already registered", p.Type)
	}
	c.sels = append(c.sels, &p)
	c.selByType[p.Type] = &p
	return nil
}

// Hint returns the provider of a hint policy type.
func (c *Catalog) Hint(typ string) (*HintProvider, bool) {
	p, ok := c.hintByType[typ]
	return p, ok
}

// Selection returns the provider of a worker-selection policy type.
func (c *Catalog) Selection(typ string) (*SelectionProvider, bool) {
	p, ok := c.selByType[typ]
	return p, ok
}

// HintProviders returns the hint providers in registration order.
func (c *Catalog) HintProviders() []*HintProvider { return slices.Clone(c.hints) }

// SelectionProviders returns the worker-selection providers in registration order.
func (c *Catalog) SelectionProviders() []*SelectionProvider { return slices.Clone(c.sels) }

// HintTypes returns the linked hint policy types, sorted.
func (c *Catalog) HintTypes() []string { return sortedKeys(c.hintByType) }

// SelectionTypes returns the linked worker-selection types, sorted.
func (c *Catalog) SelectionTypes() []string { return sortedKeys(c.selByType) }

// DefaultHints returns the hint providers that run by default under a
// worker-selection type, in registration order.
func (c *Catalog) DefaultHints(selectionType string) []*HintProvider {
	var out []*HintProvider
	for _, p := range c.hints {
		for _, h := range p.DefaultHosts {
			if h.Hosts(selectionType) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
