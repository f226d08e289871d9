package declared

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// ErrDeclaredOnly is what a declared hint policy's BuildHints returns: a
// declared type is known by its declaration, not linked, and nothing in
// this binary can run it.
var ErrDeclaredOnly = errors.New("declared hint policy types are for validation only and cannot run: the router's own build runs them")

// Catalog is a loaded declaration.
type Catalog struct {
	// Name is the declaration's metadata.name, possibly empty.
	Name string
	// Catalog holds the declared types, for hintsconfig.Compile and the
	// operator's compile step. Its hint policies never run.
	Catalog *hints.Catalog
	// Form is the policy-file form the router's build reads
	// (Document.PolicyFileForm); empty when the declaration does not say,
	// and then the router's target picks it (rolegraph.RouterForm: the
	// released RouterWideHint for a Dynamo Frontend, PerRoleHints for the
	// sidecar).
	Form hintsconfig.Form
	// DynamoVersion is the Dynamo version the router's Frontend runs
	// (Document.DynamoVersion), as written; empty when the declaration
	// does not say.
	DynamoVersion string
}

// Problem is one thing wrong with a declaration, located.
type Problem struct {
	// Path is where it is, such as "hints[1].parameters.properties.ttl".
	Path string
	// Line is its 1-based line in the text, 0 when unknown.
	Line int
	// Message says what is wrong.
	Message string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", p.Line, p.Path, p.Message)
	}
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error is a declaration that cannot be used: every problem found.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid policy catalog: " + strings.Join(lines, "; ")
}

// LoadConfigMap reads the declaration a ConfigMap holds under
// v1alpha1.CatalogKey (a router names its catalog with such a ConfigMap,
// labelled v1alpha1.CatalogForLabel) and loads it as Load does.
func LoadConfigMap(cm *corev1.ConfigMap) (*Catalog, error) {
	return DefaultBudget().LoadConfigMap(cm)
}

// LoadConfigMap is LoadConfigMap within the budget b.
func (b Budget) LoadConfigMap(cm *corev1.ConfigMap) (*Catalog, error) {
	text, ok := cm.Data[v1alpha1.CatalogKey]
	if !ok {
		return nil, fmt.Errorf("it has no key %s (keys: %s)", v1alpha1.CatalogKey, strings.Join(slices.Sorted(maps.Keys(cm.Data)), ", "))
	}
	return b.Load([]byte(text))
}

// Load reads and checks a declaration and builds its catalog, within
// DefaultBudget. Every schema is checked and every CEL expression compiled
// here, once; a bad declaration is an *Error listing each problem with its
// place.
func Load(data []byte) (*Catalog, error) {
	return DefaultBudget().Load(data)
}

// Load is Load within the budget b: a declaration over it is an *Error
// found by counting, before anything is compiled.
func (b Budget) Load(data []byte) (*Catalog, error) {
	if len(data) > MaxDocumentBytes {
		return nil, &Error{Problems: []Problem{{Message: fmt.Sprintf("the declaration is %d bytes, over the limit of %d", len(data), MaxDocumentBytes)}}}
	}
	if probs := b.CheckSize(len(data)); probs != nil {
		return nil, &Error{Problems: probs}
	}
	if bytes.Contains(data, []byte("\n---")) || bytes.HasPrefix(data, []byte("---\n---")) {
		if docs := documents(data); docs > 1 {
			return nil, &Error{Problems: []Problem{{Message: fmt.Sprintf("the text holds %d YAML documents; a declaration is exactly one", docs)}}}
		}
	}
	var doc Document
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, &Error{Problems: []Problem{{Message: "not a PolicyCatalog: " + strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: ")}}}
	}
	l := newLocator(data)
	if n := l.numberAt("dynamoVersion"); n != "" {
		// A version is text: 1.10 read as a number is 1.1.
		return nil, &Error{Problems: []Problem{{Path: "dynamoVersion", Line: l.line("dynamoVersion"),
			Message: fmt.Sprintf("%s is a YAML number, which would read as %q; quote the version: dynamoVersion: \"%s\"", n, doc.DynamoVersion, n)}}}
	}
	u := Measure(&doc)
	if probs := b.Check(&doc, u); len(probs) > 0 {
		for i := range probs {
			probs[i].Line = l.line(probs[i].Path)
		}
		return nil, &Error{Problems: probs}
	}
	if b.admit != nil {
		if err := b.admit(u); err != nil {
			return nil, err
		}
	}
	cat, probs := build(&doc)
	for i := range probs {
		probs[i].Line = l.line(probs[i].Path)
	}
	if len(probs) > 0 {
		return nil, &Error{Problems: probs}
	}
	return cat, nil
}

// build checks a parsed declaration and registers its types.
func build(doc *Document) (*Catalog, []Problem) {
	var probs []Problem
	fail := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if doc.APIVersion != APIVersion {
		fail("apiVersion", "must be %s, not %q", APIVersion, doc.APIVersion)
	}
	if doc.Kind != Kind {
		fail("kind", "must be %s, not %q", Kind, doc.Kind)
	}
	if !doc.PolicyFileForm.Valid() {
		fail("policyFileForm", "%q is not a policy-file form; use %s (each role lists its hints) or %s (one kv_hint_policy for the router, as a released Dynamo Frontend reads), or leave it out for the form of the router's target",
			doc.PolicyFileForm, hintsconfig.FormPerRoleHints, hintsconfig.FormRouterWideHint)
	}
	if v := doc.DynamoVersion; v != "" {
		if _, _, ok := dynamograph.ParseVersion(v); !ok {
			fail("dynamoVersion", "%q is not a Dynamo version; write its release line, such as 1.6 or 1.7.0 (or leave the key out: a RouterRole's %s annotation, "+
				"else the router's runtimeVersion or Frontend image tag, else 1.6)", v, v1alpha1.DynamoVersionAnnotation)
		}
	}
	if len(doc.WorkerSelections) == 0 {
		fail("workerSelections", "declares no worker-selection type; a role needs one")
	}
	if len(doc.WorkerSelections) > MaxTypes {
		fail("workerSelections", "declares %d types, over the limit of %d", len(doc.WorkerSelections), MaxTypes)
	}
	if len(doc.Hints) > MaxTypes {
		fail("hints", "declares %d types, over the limit of %d", len(doc.Hints), MaxTypes)
	}
	if len(probs) > 0 {
		return nil, probs
	}

	cat := hints.NewCatalog()
	ps := patternSet{}
	var declaredSels []string
	for _, d := range doc.WorkerSelections {
		declaredSels = append(declaredSels, d.Type)
	}
	for i, d := range doc.WorkerSelections {
		path := fmt.Sprintf("workerSelections[%d]", i)
		p, more := selectionProvider(d, path, ps)
		probs = append(probs, more...)
		if p == nil {
			continue
		}
		if err := cat.RegisterSelection(*p); err != nil {
			fail(path+".type", "%v", err)
		}
	}
	for i, d := range doc.Hints {
		path := fmt.Sprintf("hints[%d]", i)
		p, more := hintProvider(d, path, ps)
		probs = append(probs, more...)
		if p == nil {
			continue
		}
		for j, h := range d.DefaultHosts {
			if h == AnyHost {
				continue
			}
			if _, ok := cat.Selection(h); ok {
				continue
			}
			if !slices.Contains(declaredSels, h) {
				fail(fmt.Sprintf("%s.defaultHosts[%d]", path, j), "%q is not a worker-selection type of this declaration; declared: %s", h, strings.Join(declaredSels, ", "))
			}
			// A host declared with problems of its own: those are reported.
			p = nil
		}
		if p == nil {
			continue
		}
		if err := cat.RegisterHint(*p); err != nil {
			fail(path, "%v", err)
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return &Catalog{Name: doc.Metadata.Name, Catalog: cat, Form: doc.PolicyFileForm, DynamoVersion: doc.DynamoVersion}, nil
}

func selectionProvider(d Selection, path string, ps patternSet) (*hints.SelectionProvider, []Problem) {
	probs := checkTypeName(d.Type, path)
	s, msgs := compileSchema(d.Parameters, path+".parameters", ps)
	probs = append(probs, located(msgs)...)
	var commits *commitProgram
	if s != nil && d.CommitsKVCopies != "" {
		commits, msgs = compileCommits(s, d.CommitsKVCopies, path+".commitsKVCopies")
		probs = append(probs, located(msgs)...)
	}
	if commits != nil {
		// A role that leaves the parameters out runs the expression on the
		// defaults alone: an expression that fails there (a key read
		// without has()) is the declaration's fault, found now.
		if params, err := s.check(context.Background(), nil); err == nil {
			if _, err := commits.eval(context.Background(), s, params); err != nil {
				probs = append(probs, Problem{Path: path + ".commitsKVCopies", Message: fmt.Sprintf(
					"fails on the parameters' defaults alone: %v; test a key that has no default with has(params.key)", err)})
			}
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	typ := d.Type
	return &hints.SelectionProvider{
		Type:        typ,
		Description: d.Description,
		Parse: func(raw hints.Params) (hints.SelectionPolicy, error) {
			ctx := context.Background()
			params, err := s.check(ctx, raw)
			if err != nil {
				return nil, err
			}
			sel := &selection{params: params}
			if commits != nil {
				if sel.commits, err = commits.eval(ctx, s, params); err != nil {
					// The declaration's expression, not the role, is at
					// fault; the role cannot be checked against it.
					return nil, &hints.ParamError{Message: fmt.Sprintf("the declared commitsKVCopies expression of %s (%s) failed on them: %v", typ, commits.source, err)}
				}
			}
			return sel, nil
		},
	}, nil
}

func hintProvider(d Hint, path string, ps patternSet) (*hints.HintProvider, []Problem) {
	probs := checkTypeName(d.Type, path)
	var commitments hints.Commitments
	for j, c := range d.Commitments {
		switch c {
		case CommitmentKVCopy, commitmentKVCopyRust:
			commitments |= hints.KVCopy
		default:
			probs = append(probs, Problem{Path: fmt.Sprintf("%s.commitments[%d]", path, j), Message: fmt.Sprintf("%q is not a commitment; known: %s (or Dynamo's spelling, %s)", c, CommitmentKVCopy, commitmentKVCopyRust)})
		}
	}
	var hosts []hints.HintHost
	for _, h := range d.DefaultHosts {
		if h == AnyHost {
			hosts = append(hosts, hints.AnyWorkerSelection)
		} else {
			hosts = append(hosts, hints.WorkerSelection(h))
		}
	}
	s, msgs := compileSchema(d.Parameters, path+".parameters", ps)
	probs = append(probs, located(msgs)...)
	if len(probs) > 0 {
		return nil, probs
	}
	return &hints.HintProvider{
		Type:         d.Type,
		Commitments:  commitments,
		DefaultHosts: hosts,
		Description:  d.Description,
		Parse: func(raw hints.Params) (hints.HintPolicy, error) {
			params, err := s.check(context.Background(), raw)
			if err != nil {
				return nil, err
			}
			return &hint{params: params}, nil
		},
	}, nil
}

// checkTypeName refuses a type name roles could not use.
func checkTypeName(typ, path string) []Problem {
	if err := hints.CheckTypeName(typ); err != nil {
		return []Problem{{Path: path + ".type", Message: fmt.Sprintf("%q %v", typ, err)}}
	}
	return nil
}

// located turns "path: message" strings into problems.
func located(msgs []string) []Problem {
	out := make([]Problem, 0, len(msgs))
	for _, m := range msgs {
		path, msg, _ := strings.Cut(m, ": ")
		out = append(out, Problem{Path: path, Message: msg})
	}
	return out
}

// selection is a parsed declared worker selection.
type selection struct {
	params  map[string]any
	commits bool
}

func (s *selection) CommitsKVCopies() bool { return s.commits }

// EffectiveParameters reports the parameters with the schema's defaults
// applied: a declaration writes a default only for a value the policy
// itself fixes, so what the router would fill from its own flags stays
// out of the compiled file.
func (s *selection) EffectiveParameters() any { return s.params }

// hint is a parsed declared hint policy: parameters, and no behaviour.
type hint struct{ params map[string]any }

func (h *hint) EffectiveParameters() any { return h.params }

// BuildHints refuses: see ErrDeclaredOnly.
func (h *hint) BuildHints(context.Context, *hints.HintContext) ([]hints.Action, error) {
	return nil, ErrDeclaredOnly
}
