package hints

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Catalog holds the hint and worker-selection policy types linked into a
// build. Registration happens at start-up, before the catalog is handed to
// anything that uses it (the kvhint entry point, a dispatcher, Compile);
// after that a Catalog is read-only and safe for concurrent use. What it
// returns are copies, so that nothing read from a catalog can change it.
//
// Register worker-selection types before the hint types they host:
// RegisterHint refuses a default host that names a selection the catalog
// does not hold yet. builtin.NewCatalog registers the built-in selections
// first, so a plugin registered after it may host any of them.
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

// RegisterHint adds a hint policy type. Registration order is the order
// default hints run in. It refuses what cannot work:
//
//   - a type name that CheckTypeName refuses, or one already registered;
//   - a nil Parse;
//   - a default host that names a worker-selection type the catalog does
//     not hold (register selections first);
//   - a provider with default hosts whose Parse refuses no parameters: a
//     role that does not list its hints runs its defaults with none, so
//     such a default would make every such role invalid;
//   - a provider that declares KVCopy and is hosted by default under a
//     selection that already has a default KVCopy policy: a role may run
//     only one, so every role that runs the defaults would be invalid.
//     Take the other policy out of that selection's defaults first with
//     SetDefaultHosts.
func (c *Catalog) RegisterHint(p HintProvider) error {
	if err := p.check(); err != nil {
		return err
	}
	if _, dup := c.hintByType[p.Type]; dup {
		return fmt.Errorf("hint policy type %q is already registered", p.Type)
	}
	p.DefaultHosts = slices.Clone(p.DefaultHosts)
	if err := c.checkDefaults(&p, p.DefaultHosts); err != nil {
		return err
	}
	c.hints = append(c.hints, &p)
	c.hintByType[p.Type] = &p
	return nil
}

// SetDefaultHosts replaces the default hosts of a registered hint type,
// with the checks of RegisterHint. It is how a custom build changes a
// selection's defaults, a built-in's included: SetDefaultHosts("kv-fetch")
// with no hosts takes kv-fetch out of kvcr's defaults, so that the build
// can register a KVCopy policy of its own in its place. Like registration,
// it belongs to start-up, before the catalog is used. A role that lists
// its hints is not affected.
func (c *Catalog) SetDefaultHosts(hintType string, hosts ...HintHost) error {
	p, ok := c.hintByType[hintType]
	if !ok {
		return fmt.Errorf("hint policy type %q is not registered; registered types: %s", hintType, strings.Join(c.HintTypes(), ", "))
	}
	hosts = slices.Clone(hosts)
	if err := c.checkDefaults(p, hosts); err != nil {
		return err
	}
	p.DefaultHosts = hosts
	return nil
}

// checkDefaults checks default hosts for provider p, which may already be
// registered (its own hosts are then not held against it).
func (c *Catalog) checkDefaults(p *HintProvider, hosts []HintHost) error {
	if len(hosts) == 0 {
		return nil
	}
	for _, h := range hosts {
		if h.any {
			continue
		}
		if h.selection == "" {
			return fmt.Errorf("hint policy type %q: a default host names no worker-selection type; use hints.WorkerSelection(type) or hints.AnyWorkerSelection", p.Type)
		}
		if _, ok := c.selByType[h.selection]; !ok {
			return fmt.Errorf("hint policy type %q: default host %q is not a registered worker-selection type (register selections before the hints they host); registered: %s",
				p.Type, h.selection, strings.Join(c.SelectionTypes(), ", "))
		}
	}
	if p.Commitments.Has(KVCopy) {
		for _, o := range c.hints {
			if o.Type == p.Type || !o.Commitments.Has(KVCopy) {
				continue
			}
			if sel, overlap := hostsOverlap(hosts, o.DefaultHosts); overlap {
				return fmt.Errorf("hint policy type %q declares KVCopy and would run by default under %s, where %q already sends the committed KV copy by default; a role runs exactly one KVCopy policy, so every role of that selection that leaves hints out would be invalid. Leave %q without default hosts (roles list it), or first take %q out of the defaults with Catalog.SetDefaultHosts(%q)",
					p.Type, sel, o.Type, p.Type, o.Type, o.Type)
			}
		}
	}
	if _, err := parseNoParams(p); err != nil {
		return fmt.Errorf("hint policy type %q has default hosts (%s), but its Parse refuses no parameters, which is what a role that leaves hints out runs it with: %v; give every parameter a default, or leave DefaultHosts empty so that roles list it with its parameters",
			p.Type, hostList(hosts), err)
	}
	return nil
}

// parseNoParams runs a provider's Parse on no parameters, a panic included.
func parseNoParams(p *HintProvider) (policy HintPolicy, err error) {
	defer func() {
		if r := recover(); r != nil {
			//lint:ignore ST1005 the message starts with the name of the method that panicked
			policy, err = nil, fmt.Errorf("Parse panicked: %v", r)
		}
	}()
	return p.Parse(nil)
}

// hostsOverlap reports whether two host lists cover a common selection,
// and names it.
func hostsOverlap(a, b []HintHost) (string, bool) {
	for _, x := range a {
		for _, y := range b {
			switch {
			case x.any && y.any:
				return "every worker selection", true
			case x.any:
				return "worker-selection " + y.selection, true
			case y.any, x.selection == y.selection:
				return "worker-selection " + x.selection, true
			}
		}
	}
	return "", false
}

func hostList(hosts []HintHost) string {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.String()
	}
	return strings.Join(names, ", ")
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

// Hint returns the provider of a hint policy type: a copy, so that
// changing it changes nothing in the catalog (SetDefaultHosts does).
func (c *Catalog) Hint(typ string) (*HintProvider, bool) {
	p, ok := c.hintByType[typ]
	if !ok {
		return nil, false
	}
	return p.clone(), true
}

// Selection returns the provider of a worker-selection policy type, a copy.
func (c *Catalog) Selection(typ string) (*SelectionProvider, bool) {
	p, ok := c.selByType[typ]
	if !ok {
		return nil, false
	}
	cp := *p
	return &cp, true
}

// HintProviders returns the hint providers in registration order, copies.
func (c *Catalog) HintProviders() []*HintProvider {
	out := make([]*HintProvider, len(c.hints))
	for i, p := range c.hints {
		out[i] = p.clone()
	}
	return out
}

// SelectionProviders returns the worker-selection providers in
// registration order, copies.
func (c *Catalog) SelectionProviders() []*SelectionProvider {
	out := make([]*SelectionProvider, len(c.sels))
	for i, p := range c.sels {
		cp := *p
		out[i] = &cp
	}
	return out
}

func (p *HintProvider) clone() *HintProvider {
	cp := *p
	cp.DefaultHosts = slices.Clone(p.DefaultHosts)
	return &cp
}

// HintTypes returns the linked hint policy types, sorted.
func (c *Catalog) HintTypes() []string { return sortedKeys(c.hintByType) }

// SelectionTypes returns the linked worker-selection types, sorted.
func (c *Catalog) SelectionTypes() []string { return sortedKeys(c.selByType) }

// DefaultHints returns the hint providers that run by default under a
// worker-selection type, in registration order, copies.
func (c *Catalog) DefaultHints(selectionType string) []*HintProvider {
	var out []*HintProvider
	for _, p := range c.hints {
		for _, h := range p.DefaultHosts {
			if h.Hosts(selectionType) {
				out = append(out, p.clone())
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
