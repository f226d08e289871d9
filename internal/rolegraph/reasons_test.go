package rolegraph

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestCatalogReasonsDocumented keeps every reason of the hints config rules
// in the API: the rules report pkg/wellknown's reasons, findings copy them
// into the Accepted condition, and api/v1alpha1/conditions.go must declare
// each under the same name as a documented ConditionReason that takes
// wellknown's value, so that docs/reference/conditions.md lists it.
func TestCatalogReasonsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	wk, err := parser.ParseFile(fset, filepath.Join(root, "pkg", "wellknown", "reasons.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, d := range wk.Decls {
		for _, spec := range constSpecs(d) {
			for _, n := range spec.Names {
				if strings.HasPrefix(n.Name, "Reason") {
					reasons = append(reasons, n.Name)
				}
			}
		}
	}
	if len(reasons) == 0 {
		t.Fatal("pkg/wellknown/reasons.go declares no Reason constant")
	}

	api, err := parser.ParseFile(fset, filepath.Join(root, "api", "v1alpha1", "conditions.go"), nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // name -> the wellknown constant it takes
	for _, d := range api.Decls {
		for _, spec := range constSpecs(d) {
			if len(spec.Values) != 1 || spec.Doc.Text() == "" && d.(*ast.GenDecl).Doc.Text() == "" {
				continue
			}
			if sel, ok := spec.Values[0].(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "wellknown" {
					documented[spec.Names[0].Name] = sel.Sel.Name
				}
			}
		}
	}
	for _, r := range reasons {
		switch got, ok := documented[r]; {
		case !ok:
			t.Errorf("api/v1alpha1/conditions.go has no documented %s = wellknown.%s: a rule's reason the Accepted condition carries would be missing from docs/reference/conditions.md", r, r)
		case got != r:
			t.Errorf("api/v1alpha1 %s takes wellknown.%s, want wellknown.%s", r, got, r)
		}
	}
}

func constSpecs(d ast.Decl) []*ast.ValueSpec {
	gd, ok := d.(*ast.GenDecl)
	if !ok || gd.Tok != token.CONST {
		return nil
	}
	var out []*ast.ValueSpec
	for _, s := range gd.Specs {
		out = append(out, s.(*ast.ValueSpec))
	}
	return out
}
