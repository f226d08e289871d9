package hintsconfig

import "github.com/kvrouter/kv-hint-operator/pkg/hints"

// Reader is what reads a router's policy file: the form the file is
// written in, and the checks the file is held to. A compiler that builds
// a router's config from its roles (the operator's) checks each role
// with CheckRole and writes the router's config with CompileRouter, both
// for the same Reader.
type Reader struct {
	// Form is the policy-file form the router's config is written in;
	// empty means FormPerRoleHints.
	Form Form
	// Target is TargetDynamo when a Dynamo Frontend reads the file (in
	// FormRouterWideHint), whose own start-up checks then hold; empty
	// for the kvhint sidecar.
	Target Target
	// DeclaredCatalog, with TargetDynamo, says the Frontend's build links
	// what the router's declared catalog lists; else it is a stock build
	// (see Config.DeclaredCatalog).
	DeclaredCatalog bool
}

// config is an empty config the reader reads.
func (rd Reader) config() *Config {
	cfg := &Config{WorkerSelection: map[string]*RoleEntry{}, Form: rd.Form}
	if rd.Target == TargetDynamo {
		cfg.Target, cfg.DeclaredCatalog = TargetDynamo, rd.DeclaredCatalog
	}
	return cfg
}

// RoleInput is one role of a router, as CheckRole checks it.
type RoleInput struct {
	// Reader is what reads the router's file. The role is checked as its
	// entry says, hints and all, whatever Reader.Form: CompileRouter
	// writes it in the form, and refuses the roles together when the form
	// cannot carry them.
	Reader Reader
	// Name is the role (one of Roles).
	Name string
	// Entry is the role's worker selection and hint list.
	Entry *RoleEntry
	// Modes gives the role its router mode, and messages where the mode
	// came from (a flag of the router's container, say).
	Modes Modes
}

// RoleResult is one role, checked and resolved.
type RoleResult struct {
	// Role is the role resolved: its selection, its effective hints in
	// the order they run (defaults expanded) and its mode; nil when the
	// role breaks a rule.
	Role *Role
	// Entry is Role in explicit form (Role.Entry), the entry a router's
	// config holds for it; nil with Role.
	Entry *RoleEntry
	// Problems are every problem found: the errors when Role is nil, and
	// warnings.
	Problems Problems
}

// CheckRole checks one role of a router against the start-up rules of
// what reads the router's file, and resolves it: the same check Compile
// makes of the role in a config of its own.
func CheckRole(cat *hints.Catalog, in RoleInput) RoleResult {
	rd := in.Reader
	rd.Form = ""
	role, probs := rd.config().compileRole(cat, in.Name, in.Entry, in.Modes, nil)
	if role == nil {
		return RoleResult{Problems: probs}
	}
	return RoleResult{Role: role, Entry: role.Entry(), Problems: probs}
}

// RouterInput is a router's roles, each as it runs (checked by CheckRole
// from its current entry or from the one it ran before), under its own
// mode (Role.Mode).
type RouterInput struct {
	Reader Reader
	Roles  []*Role
}

// RouterResult is a router's config.
type RouterResult struct {
	// Graph is the router's config as its routers accept it: compiled by
	// Compile from the roles' entries, each written as Reader.Form holds
	// it.
	Graph *Graph
	// Problems are Compile's.
	Problems Problems
	// CannotCarry, in FormRouterWideHint, is the
	// ReasonPolicyFormCannotCarry problem that says why the form cannot
	// carry the roles (RouterWideHintPolicy); nil when it can.
	CannotCarry *Problem
}

// CompileRouter writes a router's roles into one config in the reader's
// form and compiles it with the same step routers run on it, so what is
// written is what they accept.
func CompileRouter(cat *hints.Catalog, in RouterInput) RouterResult {
	cfg := in.Reader.config()
	modes := Modes{Roles: make(map[string]RouterMode, len(in.Roles))}
	for _, r := range in.Roles {
		cfg.WorkerSelection[r.Name] = r.entryIn(in.Reader.Form)
		modes.Roles[r.Name] = r.Mode
	}
	g, probs := Compile(cat, cfg, modes)
	res := RouterResult{Graph: g, Problems: probs}
	if in.Reader.Form == FormRouterWideHint {
		_, res.CannotCarry = RouterWideHintPolicy(g.Roles)
	}
	return res
}

// entryIn is the entry the role runs, as a config in form holds it. In
// FormRouterWideHint a role off the KV path is Dynamo's built-in
// selector, written as default: its router mode picks the worker, and a
// released Frontend refuses to start with a selected custom instance
// under any --router-mode but kv ("linked worker-selection policies
// require --router-mode kv"). It runs no hints off the KV path in either
// form.
func (r *Role) entryIn(form Form) *RoleEntry {
	if form != FormRouterWideHint || r.Mode == ModeKV {
		return r.Entry()
	}
	return &RoleEntry{Type: BuiltinSelectionType, Hints: &[]HintSpec{}}
}
