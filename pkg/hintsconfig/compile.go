package hintsconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// MaxHintsPerRole caps a role's hint list.
const MaxHintsPerRole = 32

// Compile checks a configuration against the start-up rules and resolves it
// into a Graph, each role under the router mode modes gives it. It reports
// every problem, not only the first. The graph holds the roles that passed;
// a caller that needs all-or-nothing (the sidecar) refuses the config when
// Problems.HasErrors.
//
// Compile checks what a config says, not what its policies will send: a
// provider declares no set of action types, so the rule that only a role's
// KV copy sender may emit kv.fetch is held where actions exist, by the
// dispatcher (pkg/dispatch, which drops any other policy's fetch as
// malformed) and by the conformance kit (pkg/hints/hintstest).
func Compile(cat *hints.Catalog, cfg *Config, modes Modes) (*Graph, Problems) {
	var probs Problems
	dynamo := cfg.Target == TargetDynamo
	for _, key := range slices.Sorted(maps.Keys(cfg.Unchecked)) {
		if dynamo && key != "request_classifier" {
			continue // checked as Dynamo checks it when the file was read
		}
		if dynamo {
			probs = append(probs, cfg.dynamoClassifier()...)
			continue
		}
		probs = append(probs, Problem{
			Severity: SeverityWarning, Reason: ReasonNotChecked, Hint: NoHint,
			Message: fmt.Sprintf("%s is kept as written and not checked by kvhint; Dynamo's router checks it at start-up", key),
		})
	}
	var routerWide *HintSpec
	if p := cfg.dynamoHintPolicyLinked(); p != nil {
		probs = append(probs, *p)
	} else {
		var ps Problems
		routerWide, ps = cfg.routerWideHints(cat, modes)
		probs = append(probs, ps...)
	}
	if dynamo {
		probs = append(probs, cfg.dynamoUnselected(cat)...)
	}
	roles := make([]*Role, 0, len(cfg.WorkerSelection))
	for _, name := range slices.Sorted(maps.Keys(cfg.WorkerSelection)) {
		role, ps := cfg.compileRole(cat, name, cfg.WorkerSelection[name], modes, routerWide)
		probs = append(probs, ps...)
		if role != nil {
			roles = append(roles, role)
		}
	}
	cfg.source.restoreNonFinite(probs)
	cfg.source.locate(probs)
	g := newGraph(roles)
	g.Unchecked = cfg.Unchecked
	if cfg.readReleased && cfg.Form == FormRouterWideHint && len(roles) == len(cfg.WorkerSelection) && !probs.HasErrors() {
		// A file read from text is written back as it was written.
		g.written = cfg
	}
	g.Form = cfg.Form.OrDefault()
	g.Target = cfg.Target
	if cfg.Target == TargetDynamo {
		// A released Frontend reads only this form, whatever the config
		// built in code said.
		g.Form = FormRouterWideHint
	}
	return g, probs
}

// routerWideHints checks the kv_hint_policy of a FormRouterWideHint config
// once, for the whole router, and returns it when the roles can run it:
// nil when there is none, or when it breaks a rule (the problems say so,
// located at kv_hint_policy, and no role runs it). A policy that no role
// on the KV path would run is an error too: hints run only there.
func (cfg *Config) routerWideHints(cat *hints.Catalog, modes Modes) (*HintSpec, Problems) {
	if cfg.Form != FormRouterWideHint || cfg.HintPolicy == nil {
		return nil, nil
	}
	c := roleCompiler{cat: cat}
	c.hint(NoHint, *cfg.HintPolicy, map[string]seenHint{})
	for i := range c.probs {
		c.probs[i].Message = kvHintPolicyKey + ": " + c.probs[i].Message
	}
	kv := len(cfg.WorkerSelection) == 0 // a file of kv_hint_policy alone: no role to judge
	for name := range cfg.WorkerSelection {
		kv = kv || modes.For(name) == ModeKV
	}
	if !kv {
		whose := ""
		if cfg.Target == TargetDynamo {
			whose = " (this is kvhint's rule, not Dynamo's start-up check: the Frontend would start, but never send a hint)"
		}
		c.fail(ReasonHintsRequireKVMode, NoHint, cfg.HintPolicy.Type, "", "%s: hints run only on the KV path, but no role of the file runs on it (%s); run the router with router mode kv, or leave kv_hint_policy out%s",
			kvHintPolicyKey, modes.origin(""), whose)
	}
	if c.probs.HasErrors() {
		return nil, c.probs
	}
	return cfg.HintPolicy, c.probs
}

// compileRole checks one role of the config and resolves it: nil and the
// problems when it breaks a rule, warnings come with a role too.
// routerWide is the config's checked kv_hint_policy, which a role of a
// FormRouterWideHint config that lists no hints runs on the KV path.
func (cfg *Config) compileRole(cat *hints.Catalog, name string, entry *RoleEntry, modes Modes, routerWide *HintSpec) (*Role, Problems) {
	dynamo := cfg.Target == TargetDynamo
	if dynamo {
		if p := cfg.dynamoSelected(name, entry, modes.For(name)); p != nil {
			p.Line = cfg.source.line(*p)
			return nil, Problems{*p}
		}
	}
	if cfg.Form == FormRouterWideHint && entry != nil && entry.Hints == nil {
		// The role runs the file's one hint policy, on the KV path.
		e := *entry
		hs := []HintSpec{}
		if routerWide != nil && modes.For(name) == ModeKV {
			hs = []HintSpec{*routerWide}
		}
		e.Hints = &hs
		entry = &e
	}
	c := roleCompiler{cat: cat, role: name, modes: modes, stock: dynamo && !cfg.DeclaredCatalog}
	role := c.compile(entry, modes.For(name))
	ps := c.probs
	if ps.HasErrors() {
		role = nil
	}
	if nf := cfg.source.checkNonFinite(name, entryTypes(entry), ps); len(nf) > 0 {
		ps, role = append(ps, nf...), nil
	}
	return role, ps
}

// CompileRole checks one role entry under a router mode and resolves it.
// It returns nil and the errors when the role breaks a rule; warnings come
// with a role too. CheckRole does the same for a role of a router whose
// file a Dynamo Frontend reads.
func CompileRole(cat *hints.Catalog, name string, e *RoleEntry, mode RouterMode) (*Role, Problems) {
	res := CheckRole(cat, RoleInput{Name: name, Entry: e, Modes: Modes{Roles: map[string]RouterMode{name: mode}}})
	return res.Role, res.Problems
}

type roleCompiler struct {
	cat   *hints.Catalog
	role  string
	modes Modes
	probs Problems
	// defaults is the worker-selection type whose defaults the role runs,
	// when it lists no hints; messages then say where the policies came
	// from.
	defaults string
	// stock says the role is checked for a stock Dynamo build
	// (TargetDynamo with no declared catalog), which links no KV-hint
	// policy: a role's hints are refused, and the defaults of this
	// catalog's providers are not run.
	stock bool
}

// fromDefaults is what a message about a role that runs its selection's
// defaults adds: where the policies came from, and how to choose others.
func (c *roleCompiler) fromDefaults(what string) string {
	if c.defaults == "" {
		return ""
	}
	listed := []string{}
	for _, p := range c.cat.DefaultHints(c.defaults) {
		listed = append(listed, "{type: "+p.Type+"}")
	}
	return fmt.Sprintf(" (%s came from the defaults of worker-selection %s, since the role lists no hints: list the role's hints instead, e.g. hints: [%s] with the ones you want, or hints: [] for none)",
		what, c.defaults, strings.Join(listed, ", "))
}

// defaultTypes lists the types of providers, for messages.
func defaultTypes(ps []*hints.HintProvider) string {
	types := make([]string, len(ps))
	for i, p := range ps {
		types[i] = p.Type
	}
	return strings.Join(types, ", ")
}

func (c *roleCompiler) fail(reason Reason, hint int, typ, key, format string, args ...any) {
	c.probs = append(c.probs, Problem{
		Severity: SeverityError, Reason: reason, Role: c.role, Hint: hint, Type: typ, Key: key,
		Message: fmt.Sprintf(format, args...),
	})
}

func (c *roleCompiler) warn(reason Reason, hint int, typ, format string, args ...any) {
	c.probs = append(c.probs, Problem{
		Severity: SeverityWarning, Reason: reason, Role: c.role, Hint: hint, Type: typ,
		Message: fmt.Sprintf(format, args...),
	})
}

func (c *roleCompiler) compile(e *RoleEntry, mode RouterMode) *Role {
	if !IsRole(c.role) {
		c.fail(ReasonInvalidRole, NoHint, "", "", "role %q is not one of Dynamo's worker types (%s); its worker_selection refuses any other key", c.role, strings.Join(Roles, ", "))
	}
	if e == nil {
		c.fail(ReasonUnknownWorkerSelection, NoHint, "", "", "the role has no entry; give it a worker-selection type, one of %s", strings.Join(c.cat.SelectionTypes(), ", "))
		return nil
	}
	if mode == "" {
		mode = ModeKV
	}
	r := &Role{Name: c.role, Mode: mode}
	if !r.Mode.Valid() {
		c.fail(ReasonInvalidRouterMode, NoHint, "", "", "%s %q is not a router mode; use one of %s", c.modes.origin(c.role), r.Mode, RouterModeList())
	}
	kvPath := r.Mode == ModeKV

	sel, selOK := c.selection(e)
	if sel != nil {
		r.Selection = *sel
	}

	var specs []HintSpec
	switch {
	case e.Hints != nil:
		specs = *e.Hints
		if len(specs) > 0 && !kvPath {
			c.fail(ReasonHintsRequireKVMode, NoHint, "", "", "hints run only on the KV path, but %s is %q; run the role with router mode kv, or write hints: []", c.modes.origin(c.role), r.Mode)
		}
	case kvPath && selOK && c.stock:
		if d := c.cat.DefaultHints(e.Type); len(d) > 0 {
			c.warn(ReasonNotChecked, NoHint, "", "the role lists no hints and runs none: a stock Dynamo build links no KV-hint policy, so the defaults of worker-selection %s in kvhint's catalog (%s) run only in the kvhint sidecar, or on a Frontend whose declared catalog says its build links them",
				e.Type, defaultTypes(d))
		}
	case kvPath && selOK:
		r.Defaulted = true
		c.defaults = e.Type
		for _, p := range c.cat.DefaultHints(e.Type) {
			specs = append(specs, HintSpec{Type: p.Type})
		}
	}
	if len(specs) > MaxHintsPerRole {
		c.fail(ReasonTooManyHints, NoHint, "", "", "the role lists %d hints, over the limit of %d", len(specs), MaxHintsPerRole)
	}

	seen := map[string]seenHint{}
	senders := []string{}
	for i, spec := range specs {
		idx := i
		if r.Defaulted {
			idx = NoHint
		}
		h := c.hint(idx, spec, seen)
		if h == nil {
			continue
		}
		if c.stock && kvPath {
			c.fail(ReasonUnknownHintType, idx, spec.Type, "", "hint policy type %q is not linked into a stock Dynamo build (linked KV-hint policy types: none; no stock catalog registers one), so the Frontend would not start on the kv_hint_policy this role needs; "+
				"kvhint's hint types run in the kvhint sidecar, and a Frontend runs one only where its build registers it, which the router's declared catalog says", spec.Type)
			continue
		}
		if h.Commitments.Has(hints.KVCopy) {
			senders = append(senders, h.ID())
		}
		if kvPath {
			r.Hints = append(r.Hints, h)
		}
	}

	if kvPath && sel != nil {
		c.checkKVCopy(sel, senders)
	}
	return r
}

func (c *roleCompiler) selection(e *RoleEntry) (*Selection, bool) {
	if e.Type == "" {
		c.fail(ReasonUnknownWorkerSelection, NoHint, "", "", "worker-selection type is required; linked types: %s", strings.Join(c.cat.SelectionTypes(), ", "))
		return nil, false
	}
	p, ok := c.cat.Selection(e.Type)
	if !ok {
		what := fmt.Sprintf("worker-selection type %q is not linked into this build (nor the name of a worker_selection instance)", e.Type)
		if e.Instance != "" {
			what = fmt.Sprintf("instance %q has worker-selection type %q, which is not linked into this build", e.Instance, e.Type)
		}
		c.fail(ReasonUnknownWorkerSelection, NoHint, e.Type, "", "%s; linked types: %s", what, strings.Join(c.cat.SelectionTypes(), ", "))
		return nil, false
	}
	policy, err := safeParse(func() (hints.SelectionPolicy, error) { return p.Parse(e.Parameters) })
	if err != nil {
		c.fail(ReasonInvalidParameters, NoHint, e.Type, paramKey(err), "worker-selection %s: %v", e.Type, err)
		return nil, true
	}
	if w, ok := policy.(hints.ParameterWarner); ok {
		for _, pw := range w.ParameterWarnings() {
			c.probs = append(c.probs, Problem{
				Severity: SeverityWarning, Reason: ReasonParameterWarning, Role: c.role, Hint: NoHint, Type: e.Type, Key: pw.Key,
				Message: fmt.Sprintf("worker-selection %s: %v", e.Type, pw),
			})
		}
	}
	return &Selection{Type: e.Type, Params: canonicalParams(policy, e.Parameters), Policy: policy}, true
}

// seenHint is a hint item already listed, by the ID it is known by.
type seenHint struct {
	idx  int
	spec HintSpec
}

// duplicateMessage says which two items share an ID, and how each is known:
// an item is known by its name, else by its type, so a name may be any
// valid name, its own type included, that no other item of the role is
// known by.
func duplicateMessage(idx int, spec HintSpec, prev seenHint) string {
	const rule = "an item is known by its name, else by its type, and no two items of a role may be known by the same; a name may equal its own type, but not another item's name or the type of an unnamed item"
	known := func(h HintSpec) string {
		if h.Name == "" {
			return fmt.Sprintf("an unnamed %s, known by its type", h.Type)
		}
		return fmt.Sprintf("a %s named %s", h.Type, h.Name)
	}
	if spec.Name == "" && prev.spec.Name == "" {
		return fmt.Sprintf("type %s is already listed as hint %d; give each instance of a repeated type a distinct name", spec.Type, prev.idx)
	}
	return fmt.Sprintf("hint %d (%s) and hint %d (%s) are both known as %q; give one of them a distinct name (%s)",
		prev.idx, known(prev.spec), idx, known(spec), spec.ID(), rule)
}

func (c *roleCompiler) hint(idx int, spec HintSpec, seen map[string]seenHint) *Hint {
	ok := true
	if spec.Name != "" {
		if err := hints.CheckName(spec.Name); err != nil {
			c.fail(ReasonInvalidHintName, idx, spec.Type, "", "hint name %q %v", spec.Name, err)
			ok = false
		}
	}
	id := spec.ID()
	if prev, dup := seen[id]; dup {
		c.fail(ReasonDuplicateHintName, idx, spec.Type, "", "%s", duplicateMessage(idx, spec, prev))
		ok = false
	} else if id != "" {
		seen[id] = seenHint{idx: idx, spec: spec}
	}
	p, known := c.cat.Hint(spec.Type)
	if !known {
		c.fail(ReasonUnknownHintType, idx, spec.Type, "", "hint policy type %q is not linked into this build; linked types: %s", spec.Type, strings.Join(c.cat.HintTypes(), ", "))
		return nil
	}
	policy, err := safeParse(func() (hints.HintPolicy, error) { return p.Parse(spec.Parameters) })
	if err != nil {
		c.fail(ReasonInvalidParameters, idx, spec.Type, paramKey(err), "%v%s", err, c.fromDefaults("hint policy "+spec.Type+", run with no parameters,"))
		ok = false
	}
	h := &Hint{Type: spec.Type, Name: spec.Name, Commitments: p.Commitments, NeverBlocks: p.NeverBlocks, Policy: policy}
	if policy != nil {
		h.Params = canonicalParams(policy, spec.Parameters)
	}
	if !ok {
		// Still counted for the KV-copy rule, so one run reports it too.
		h.Policy = nil
	}
	return h
}

func (c *roleCompiler) checkKVCopy(sel *Selection, senders []string) {
	commits := sel.Policy != nil && sel.Policy.CommitsKVCopies()
	switch {
	case commits && len(senders) == 0:
		c.fail(ReasonKVCopySenderMissing, NoHint, sel.Type, "", "worker-selection %s commits KV copies, but no hint policy sends them; list exactly one KVCopy hint policy (%s)%s", sel.Type, strings.Join(c.kvCopyTypes(), ", "), c.fromDefaults("the role's hint policies"))
	case commits && len(senders) > 1:
		c.fail(ReasonKVCopySenderDuplicate, NoHint, sel.Type, "", "worker-selection %s commits KV copies, and %d hint policies send them (%s); keep exactly one%s", sel.Type, len(senders), strings.Join(senders, ", "), c.fromDefaults(strings.Join(senders, " and ")))
	case !commits && len(senders) > 0 && sel.Policy != nil:
		c.warn(ReasonKVCopySenderUnused, NoHint, sel.Type, "hint policies %s send committed KV copies, but worker-selection %s as configured never commits any; they will send nothing", strings.Join(senders, ", "), sel.Type)
	}
}

func (c *roleCompiler) kvCopyTypes() []string {
	var out []string
	for _, p := range c.cat.HintProviders() {
		if p.Commitments.Has(hints.KVCopy) {
			out = append(out, p.Type)
		}
	}
	return out
}

// safeParse runs a provider's Parse, turning a panic into an error: a
// third-party plugin must not take the operator or the sidecar down.
func safeParse[T any](parse func() (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("the provider panicked while parsing parameters: %v", r)
		}
	}()
	return parse()
}

// entryTypes returns the type of a role's hint item, or of its worker
// selection for NoHint, for problems found outside the compile step.
func entryTypes(e *RoleEntry) func(hint int) string {
	return func(hint int) string {
		switch {
		case e == nil:
			return ""
		case hint == NoHint:
			return e.Type
		case e.Hints != nil && hint < len(*e.Hints):
			return (*e.Hints)[hint].Type
		}
		return ""
	}
}
