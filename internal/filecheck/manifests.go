package filecheck

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// ManifestSet is the RouterRoles and HintPolicies of the manifest files on
// the command line. They are compiled together, namespace by namespace, as
// the manager would compile them once applied: a policyRef in one file
// resolves to a HintPolicy in another.
type ManifestSet struct {
	files []string
	// byNamespace holds the objects; objects without a namespace go under
	// "", the namespace they would be applied to.
	byNamespace map[string]*rolegraph.Input
	// origin maps "Kind namespace/name" to the file it came from.
	origin map[string]string
	// problems are the problems found, per file, in the order found.
	problems map[string][]Problem
	// positions locate objects and documents, per file.
	positions map[string]*manifestPositions
	// failed is set when any object or document breaks a rule.
	failed bool
	// declarations are the ConfigMaps that declare a router's catalog
	// (v1alpha1.CatalogForLabel), by namespace, then router: that router's
	// RouterRoles are compiled against it, as the manager compiles them.
	declarations map[string]map[string][]corev1.ConfigMap
	// form, target and declared are NewManifestSet's.
	form     hintsconfig.Form
	target   hintsconfig.Target
	declared bool
}

// NewManifestSet returns an empty set. form is the policy-file form of
// every router whose declared catalog states none (--target dynamo:
// hintsconfig.FormRouterWideHint); empty, each router's target decides
// (rolegraph.RouterForm). target is the target every router is checked
// for (--target): empty, each router's own (rolegraph.Input.Target).
// declared says the catalog the manifests are compiled against, for
// routers whose manifests declare none, is itself a declared one
// (--catalog): their builds link what it lists.
func NewManifestSet(form hintsconfig.Form, target hintsconfig.Target, declared bool) *ManifestSet {
	return &ManifestSet{byNamespace: map[string]*rolegraph.Input{}, origin: map[string]string{},
		problems: map[string][]Problem{}, positions: map[string]*manifestPositions{},
		declarations: map[string]map[string][]corev1.ConfigMap{},
		form:         form, target: target, declared: declared}
}

// Files are the manifest files added, in order.
func (s *ManifestSet) Files() []string { return s.files }

// Failed reports whether any object or document breaks a rule.
func (s *ManifestSet) Failed() bool { return s.failed }

// Add reads one manifest file. Documents that cannot be read are problems
// of the file; the rest are kept.
func (s *ManifestSet) Add(file string, data []byte) {
	s.files = append(s.files, file)
	pos := newManifestPositions(data)
	s.positions[file] = pos
	var in rolegraph.Input
	if err := rolegraph.ReadManifests(data, &in); err != nil {
		for _, e := range unjoin(err) {
			p := Problem{File: file, Object: "manifest", Reason: string(hintsconfig.ReasonInvalidConfig), Severity: SeverityError}
			var de *rolegraph.DocumentError
			if errors.As(e, &de) {
				p.Object, p.Line, e = fmt.Sprintf("document %d", de.Document), pos.document(de.Document), de.Err
			}
			p.Message, p.Where = e.Error(), p.Object
			s.add1(p)
		}
	}
	for _, rr := range in.RouterRoles {
		if s.claim(file, "RouterRole", rr.ObjectMeta) {
			s.input(rr.Namespace).RouterRoles = append(s.input(rr.Namespace).RouterRoles, rr)
		}
	}
	for _, hp := range in.HintPolicies {
		if s.claim(file, "HintPolicy", hp.ObjectMeta) {
			s.input(hp.Namespace).HintPolicies = append(s.input(hp.Namespace).HintPolicies, hp)
		}
	}
	// A router Deployment's template says what Dynamo's router will run
	// (its --router-mode, whether it reads the mounted file); a declared
	// catalog says which types its build links.
	for _, d := range in.Deployments {
		if d.Labels[v1alpha1.RouterLabel] != "" && s.claim(file, "Deployment", d.ObjectMeta) {
			s.input(d.Namespace).Deployments = append(s.input(d.Namespace).Deployments, d)
		}
	}
	for _, g := range in.Graphs {
		if g.Labels[v1alpha1.RouterLabel] != "" && s.claim(file, dynamograph.Kind, g.ObjectMeta) {
			s.input(g.Namespace).Graphs = append(s.input(g.Namespace).Graphs, g)
		}
	}
	for _, cm := range in.ConfigMaps {
		router := cm.Labels[v1alpha1.CatalogForLabel]
		if router == "" || !s.claim(file, "ConfigMap", cm.ObjectMeta) {
			continue
		}
		s.input(cm.Namespace) // the namespace is compiled even with no role in it
		if s.declarations[cm.Namespace] == nil {
			s.declarations[cm.Namespace] = map[string][]corev1.ConfigMap{}
		}
		s.declarations[cm.Namespace][router] = append(s.declarations[cm.Namespace][router], cm)
	}
}

// part is the objects of a namespace compiled against one catalog.
type part struct {
	cat *hints.Catalog
	in  rolegraph.Input
}

// parts splits a namespace's objects by the catalog their router's roles
// are compiled against: each router whose catalog the manifests declare
// gets a part of its own; the others share one, against cat. A router
// whose declaration cannot be used stays with the others, every one of its
// roles refused with the manager's finding (rolegraph.RouterCatalog).
func (s *ManifestSet) parts(ns string, in *rolegraph.Input, cat *hints.Catalog) []part {
	rest := part{cat: cat, in: *in}
	rest.in.RouterRoles = nil
	rest.in.Target = s.target
	if s.form != "" || s.declared {
		rest.in.PolicyFileForms = map[string]hintsconfig.Form{}
		rest.in.DeclaredCatalogs = map[string]bool{}
		for _, rr := range in.RouterRoles {
			rest.in.PolicyFileForms[rr.Spec.Router] = s.form
			rest.in.DeclaredCatalogs[rr.Spec.Router] = s.declared
		}
	}
	own := map[string]int{}
	var parts []part
	decls := s.declarations[ns]
	for _, router := range slices.Sorted(maps.Keys(decls)) {
		decl, problem := rolegraph.RouterCatalog(router, decls[router], loadDeclaration)
		if problem != nil {
			if rest.in.CatalogProblems == nil {
				rest.in.CatalogProblems = map[string]rolegraph.Finding{}
			}
			rest.in.CatalogProblems[router] = *problem
			continue
		}
		p := part{cat: decl.Catalog, in: *in}
		p.in.RouterRoles = nil
		p.in.PolicyFileForms = map[string]hintsconfig.Form{router: cmp.Or(decl.Form, s.form)}
		p.in.DynamoVersions = map[string]string{router: decl.DynamoVersion}
		p.in.DeclaredCatalogs = map[string]bool{router: true}
		own[router] = len(parts)
		parts = append(parts, p)
	}
	for _, rr := range in.RouterRoles {
		if i, ok := own[rr.Spec.Router]; ok {
			parts[i].in.RouterRoles = append(parts[i].in.RouterRoles, rr)
		} else {
			rest.in.RouterRoles = append(rest.in.RouterRoles, rr)
		}
	}
	return append([]part{rest}, parts...)
}

// loadDeclaration reads the catalog a ConfigMap declares, the
// policy-file form it says the router's build reads and the Dynamo
// version it says the router runs.
func loadDeclaration(cm *corev1.ConfigMap) (rolegraph.Declaration, error) {
	d, err := declared.LoadConfigMap(cm)
	if err != nil {
		return rolegraph.Declaration{}, err
	}
	return rolegraph.Declaration{Catalog: d.Catalog, Form: d.Form, DynamoVersion: d.DynamoVersion}, nil
}

// claim records where an object comes from; an object defined twice keeps
// its first definition, as the second apply would overwrite it.
func (s *ManifestSet) claim(file, kind string, m metav1.ObjectMeta) bool {
	key := objectName(kind, m.Namespace, m.Name)
	p := Problem{File: file, Object: key, Where: key, Line: s.positions[file].field(key, ""), Reason: string(hintsconfig.ReasonInvalidConfig), Severity: SeverityError}
	if m.Name == "" {
		p.Object, p.Where, p.Location, p.Message = kind, kind, "metadata.name", "metadata.name is required"
		s.add1(p)
		return false
	}
	if first, dup := s.origin[key]; dup {
		p.Message = fmt.Sprintf("also defined in %s; keeping that one", first)
		if first == file {
			p.Message = "defined twice in the file; keeping the first"
		}
		s.add1(p)
		return false
	}
	s.origin[key] = file
	return true
}

func (s *ManifestSet) input(ns string) *rolegraph.Input {
	in, ok := s.byNamespace[ns]
	if !ok {
		in = &rolegraph.Input{Now: metav1.Now()}
		s.byNamespace[ns] = in
	}
	return in
}

func (s *ManifestSet) add1(p Problem) {
	s.problems[p.File] = append(s.problems[p.File], p)
	if p.Severity == SeverityError {
		s.failed = true
	}
}

// CompiledRouter is one router's compiled config and where it came from.
type CompiledRouter struct {
	Namespace string
	Router    *rolegraph.Router
	// Files are the files of the router's RouterRoles, sorted.
	Files []string
}

// Compile compiles every namespace with the same function the manager
// runs, records every finding against the file of its object, and returns
// the compiled routers, by namespace then router. A router whose catalog
// the manifests declare is compiled against it (see parts). A HintPolicy
// is reported as the catalogs of the roles that use it check it; one no
// role uses, as the manager checks it: against cat, or, when only
// declarations know its type, against each of them.
func (s *ManifestSet) Compile(cat *hints.Catalog) []CompiledRouter {
	var routers []CompiledRouter
	for _, ns := range slices.Sorted(maps.Keys(s.byNamespace)) {
		in := s.byNamespace[ns]
		parts := s.parts(ns, in, cat)
		outs := make([]*rolegraph.Output, len(parts))
		used := map[string]bool{}
		for i, p := range parts {
			outs[i] = rolegraph.Compile(p.cat, p.in)
			for _, r := range outs[i].RouterRoles {
				s.report("RouterRole", ns, r.Name, r.Findings)
			}
			// A router that would start without the compiled file: the
			// manager's Programmed=False PolicyFileNotRead, on every role
			// of it that is accepted (the others fail already).
			for _, r := range outs[i].Routers {
				f := rolegraph.PolicyFileFinding(r.Workloads)
				if f == nil {
					continue
				}
				for _, rr := range p.in.RouterRoles {
					if res := outs[i].RouterRole(rr.Name); rr.Spec.Router == r.Name && res != nil && res.Accepted() {
						s.report("RouterRole", ns, rr.Name, rolegraph.Findings{*f})
					}
				}
			}
			for _, r := range outs[i].HintPolicies {
				used[r.Name] = used[r.Name] || len(r.Status.UsedBy) > 0
			}
			for _, r := range outs[i].Routers {
				var files []string
				for _, rr := range p.in.RouterRoles {
					if rr.Spec.Router == r.Name {
						files = append(files, s.origin[objectName("RouterRole", ns, rr.Name)])
					}
				}
				slices.Sort(files)
				routers = append(routers, CompiledRouter{Namespace: ns, Router: r, Files: slices.Compact(files)})
			}
		}
		types := map[string]string{}
		for _, hp := range in.HintPolicies {
			types[hp.Name] = hp.Spec.Type
		}
		declaredOnly := func(typ string) bool {
			if _, ok := cat.Hint(typ); ok {
				return false
			}
			return slices.ContainsFunc(parts[1:], func(p part) bool { _, ok := p.cat.Hint(typ); return ok })
		}
		findings := map[string]rolegraph.Findings{}
		for i, out := range outs {
			for _, r := range out.HintPolicies {
				_, here := parts[i].cat.Hint(types[r.Name])
				var counts bool
				switch {
				case used[r.Name]:
					counts = len(r.Status.UsedBy) > 0
				case declaredOnly(types[r.Name]):
					counts = i > 0 && here
				default:
					counts = i == 0
				}
				if counts {
					for _, f := range r.Findings {
						if !slices.Contains(findings[r.Name], f) {
							findings[r.Name] = append(findings[r.Name], f)
						}
					}
				}
			}
		}
		for _, name := range slices.Sorted(maps.Keys(types)) {
			s.report("HintPolicy", ns, name, findings[name])
		}
	}
	slices.SortStableFunc(routers, func(a, b CompiledRouter) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Router.Name, b.Router.Name))
	})
	return routers
}

// report records findings against the file and line of their object.
func (s *ManifestSet) report(kind, ns, name string, findings rolegraph.Findings) {
	key := objectName(kind, ns, name)
	file := s.origin[key]
	for _, f := range findings {
		where := key
		if l := f.Location(); l != "" {
			where += " " + l
		}
		s.add1(Problem{
			File: file, Line: s.positions[file].field(key, f.KeyField()), Object: key, Location: f.Field, Type: f.Detail, Key: f.Key,
			Reason: string(f.Reason), Message: f.Message, Severity: f.Severity.String(), Where: where,
		})
	}
}

// Objects counts the RouterRoles and HintPolicies read.
func (s *ManifestSet) Objects() int {
	n := 0
	for _, in := range s.byNamespace {
		n += len(in.RouterRoles) + len(in.HintPolicies)
	}
	return n
}

// All returns every problem, files in the order given.
func (s *ManifestSet) All() []Problem {
	var out []Problem
	for _, file := range s.files {
		out = append(out, s.problems[file]...)
	}
	return out
}

// Print writes every problem as a line of text.
func (s *ManifestSet) Print(w io.Writer) {
	for _, p := range s.All() {
		fmt.Fprintln(w, p.Text())
	}
}

func objectName(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// Note says, for standard error, which router a compiled config is for.
func (c CompiledRouter) Note() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# router %s", c.Router.Name)
	if c.Namespace != "" {
		fmt.Fprintf(&b, " in namespace %s", c.Namespace)
	}
	if c.Router.Config == nil {
		fmt.Fprintf(&b, ": ConfigMap %s holds no %s (no role is accepted), only %s; hash %s, from %s",
			v1alpha1.HintsConfigMapName(c.Router.Name), v1alpha1.HintsConfigKey, v1alpha1.RolesKey, c.Router.Hash, strings.Join(c.Files, ", "))
		return b.String()
	}
	fmt.Fprintf(&b, ": ConfigMap %s, key %s (with %s, hash %s over both), from %s",
		v1alpha1.HintsConfigMapName(c.Router.Name), v1alpha1.HintsConfigKey, v1alpha1.RolesKey, c.Router.Hash, strings.Join(c.Files, ", "))
	return b.String()
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
