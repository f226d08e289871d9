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
	// lines are the problems to print, per file, in the order found.
	lines map[string][]string
	// failed is set when any object or document breaks a rule.
	failed bool
}

func newManifestSet() *manifestSet {
	return &manifestSet{byNamespace: map[string]*rolegraph.Input{}, origin: map[string]string{}, lines: map[string][]string{}}
}

// add reads one manifest file. Documents that cannot be read are problems
// of the file; the rest are kept.
func (s *manifestSet) add(file string, data []byte) {
	s.files = append(s.files, file)
	var in rolegraph.Input
	if err := rolegraph.ReadManifests(data, &in); err != nil {
		for _, e := range unjoin(err) {
			loc := "manifest"
			var de *rolegraph.DocumentError
			if errors.As(e, &de) {
				loc, e = fmt.Sprintf("document %d", de.Document), de.Err
			}
			s.problem(file, fmt.Sprintf("%s: %s: %v", loc, hintsconfig.ReasonInvalidConfig, e))
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
	if m.Name == "" {
		s.problem(file, fmt.Sprintf("%s: %s: metadata.name is required", kind, hintsconfig.ReasonInvalidConfig))
		return false
	}
	if first, dup := s.origin[key]; dup {
		s.problem(file, fmt.Sprintf("%s: %s: also defined in %s; keeping that one", key, hintsconfig.ReasonInvalidConfig, first))
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

func (s *manifestSet) problem(file, line string) {
	s.lines[file] = append(s.lines[file], line)
	s.failed = true
}

func (s *manifestSet) warning(file, line string) {
	s.lines[file] = append(s.lines[file], line)
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

// report renders findings as FILE: LOCATION: Reason: message lines.
func (s *manifestSet) report(kind, ns, name string, findings rolegraph.Findings) {
	key := objectName(kind, ns, name)
	file := s.origin[key]
	for _, f := range findings {
		loc := key
		if l := f.Location(); l != "" {
			loc += " " + l
		}
		if f.Severity == hintsconfig.SeverityWarning {
			s.warning(file, fmt.Sprintf("%s: %s (warning): %s", loc, f.Reason, f.Message))
			continue
		}
		s.problem(file, fmt.Sprintf("%s: %s: %s", loc, f.Reason, f.Message))
	}
}

// print writes every recorded line, prefixed with its file, files in the
// order given.
func (s *manifestSet) print(w io.Writer) {
	for _, file := range s.files {
		for _, line := range s.lines[file] {
			fmt.Fprintf(w, "%s: %s\n", file, line)
		}
	}
}

func objectName(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// header is the comment block that precedes a compiled router's config.
func (c compiledRouter) header() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# source: %s\n", strings.Join(c.files, ", "))
	if c.namespace != "" {
		fmt.Fprintf(&b, "# namespace: %s\n", c.namespace)
	}
	fmt.Fprintf(&b, "# router: %s (ConfigMap %s, key %s)\n", c.router.Name, v1alpha1.HintsConfigMapName(c.router.Name), v1alpha1.HintsConfigKey)
	fmt.Fprintf(&b, "# hash: %s\n", c.router.Hash)
	return b.String()
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
