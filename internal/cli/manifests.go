package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// manifestSet is the RouterRoles and HintPolicies of the manifest files on
// the command line. They are compiled together, namespace by namespace, as
// the manager would compile them once applied: a policyRef in one file
// resolves to a HintPolicy in another.
type manifestSet struct {
	files []string
	// byNamespace holds the objects; objects without a namespace go under
	// "", the namespace they would be applied to.
	byNamespace map[string]*rolegraph.Input
	// origin maps "Kind namespace/name" to the file it came from.
	origin map[string]string
	// problems are the problems found, per file, in the order found.
	problems map[string][]problem
	// positions locate objects and documents, per file.
	positions map[string]*manifestPositions
	// failed is set when any object or document breaks a rule.
	failed bool
}

func newManifestSet() *manifestSet {
	return &manifestSet{byNamespace: map[string]*rolegraph.Input{}, origin: map[string]string{},
		problems: map[string][]problem{}, positions: map[string]*manifestPositions{}}
}

// add reads one manifest file. Documents that cannot be read are problems
// of the file; the rest are kept.
func (s *manifestSet) add(file string, data []byte) {
	s.files = append(s.files, file)
	pos := newManifestPositions(data)
	s.positions[file] = pos
	var in rolegraph.Input
	if err := rolegraph.ReadManifests(data, &in); err != nil {
		for _, e := range unjoin(err) {
			p := problem{File: file, Object: "manifest", Reason: string(hintsconfig.ReasonInvalidConfig), Severity: severityError}
			var de *rolegraph.DocumentError
			if errors.As(e, &de) {
				p.Object, p.Line, e = fmt.Sprintf("document %d", de.Document), pos.document(de.Document), de.Err
			}
			p.Message, p.where = e.Error(), p.Object
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
}

// claim records where an object comes from; an object defined twice keeps
// its first definition, as the second apply would overwrite it.
func (s *manifestSet) claim(file, kind string, m metav1.ObjectMeta) bool {
	key := objectName(kind, m.Namespace, m.Name)
	p := problem{File: file, Object: key, where: key, Line: s.positions[file].field(key, ""), Reason: string(hintsconfig.ReasonInvalidConfig), Severity: severityError}
	if m.Name == "" {
		p.Object, p.where, p.Location, p.Message = kind, kind, "metadata.name", "metadata.name is required"
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

func (s *manifestSet) input(ns string) *rolegraph.Input {
	in, ok := s.byNamespace[ns]
	if !ok {
		in = &rolegraph.Input{Now: metav1.Now()}
		s.byNamespace[ns] = in
	}
	return in
}

func (s *manifestSet) add1(p problem) {
	s.problems[p.File] = append(s.problems[p.File], p)
	if p.Severity == severityError {
		s.failed = true
	}
}

// compiledRouter is one router's compiled config and where it came from.
type compiledRouter struct {
	namespace string
	router    *rolegraph.Router
	files     []string
}

// compile compiles every namespace with the same function the manager
// runs, records every finding against the file of its object, and returns
// the compiled routers, by namespace then router.
func (s *manifestSet) compile(cat *hints.Catalog) []compiledRouter {
	var routers []compiledRouter
	namespaces := make([]string, 0, len(s.byNamespace))
	for ns := range s.byNamespace {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		in := s.byNamespace[ns]
		out := rolegraph.Compile(cat, *in)
		for _, r := range out.RouterRoles {
			s.report("RouterRole", ns, r.Name, r.Findings)
		}
		for _, r := range out.HintPolicies {
			s.report("HintPolicy", ns, r.Name, r.Findings)
		}
		for _, r := range out.Routers {
			var files []string
			for _, rr := range in.RouterRoles {
				if rr.Spec.Router == r.Name {
					files = append(files, s.origin[objectName("RouterRole", ns, rr.Name)])
				}
			}
			slices.Sort(files)
			routers = append(routers, compiledRouter{namespace: ns, router: r, files: slices.Compact(files)})
		}
	}
	return routers
}

// report records findings against the file and line of their object.
func (s *manifestSet) report(kind, ns, name string, findings rolegraph.Findings) {
	key := objectName(kind, ns, name)
	file := s.origin[key]
	for _, f := range findings {
		where := key
		if l := f.Location(); l != "" {
			where += " " + l
		}
		s.add1(problem{
			File: file, Line: s.positions[file].field(key, f.KeyField()), Object: key, Location: f.Field, Type: f.Detail, Key: f.Key,
			Reason: string(f.Reason), Message: f.Message, Severity: f.Severity.String(), where: where,
		})
	}
}

// objects counts the RouterRoles and HintPolicies read.
func (s *manifestSet) objects() int {
	n := 0
	for _, in := range s.byNamespace {
		n += len(in.RouterRoles) + len(in.HintPolicies)
	}
	return n
}

// all returns every problem, files in the order given.
func (s *manifestSet) all() []problem {
	var out []problem
	for _, file := range s.files {
		out = append(out, s.problems[file]...)
	}
	return out
}

// print writes every problem as a line of text.
func (s *manifestSet) print(w io.Writer) {
	for _, p := range s.all() {
		fmt.Fprintln(w, p.text())
	}
}

func objectName(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// note says, for standard error, which router a compiled config is for.
func (c compiledRouter) note() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# router %s", c.router.Name)
	if c.namespace != "" {
		fmt.Fprintf(&b, " in namespace %s", c.namespace)
	}
	if c.router.Config == nil {
		fmt.Fprintf(&b, ": ConfigMap %s holds no %s (no role is accepted), only %s; hash %s, from %s",
			v1alpha1.HintsConfigMapName(c.router.Name), v1alpha1.HintsConfigKey, v1alpha1.RolesKey, c.router.Hash, strings.Join(c.files, ", "))
		return b.String()
	}
	fmt.Fprintf(&b, ": ConfigMap %s, key %s (with %s, hash %s over both), from %s",
		v1alpha1.HintsConfigMapName(c.router.Name), v1alpha1.HintsConfigKey, v1alpha1.RolesKey, c.router.Hash, strings.Join(c.files, ", "))
	return b.String()
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
