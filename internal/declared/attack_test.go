package declared

import (
	"fmt"
	"strings"
)

// manyRules writes a declaration of types hint types (and one worker
// selection), each with a parameter schema of rules CEL rules: the shape
// of the many-rules catalog that, with 128 types and 125 rules (1 MB),
// took 15 s and 747 MB to load before the budget.
func manyRules(types, rules int) []byte {
	return hintTypes(types, func(b *strings.Builder, t int) {
		fmt.Fprintf(b, "  - type: hint-%d\n    parameters:\n      type: object\n      properties:\n        a: {type: integer, default: 1}\n        b: {type: string, maxLength: 64, default: x}\n      x-kubernetes-validations:\n", t)
		for r := range rules {
			fmt.Fprintf(b, "        - rule: self.a + %d > 0 && size(self.b) < %d && true\n", r, 64+r)
		}
	})
}

// hintTypes writes a declaration of one worker selection and types hint
// types, each written by typ.
func hintTypes(types int, typ func(b *strings.Builder, t int)) []byte {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("workerSelections:\n  - type: pick\nhints:\n")
	for t := range types {
		typ(&b, t)
	}
	return []byte(b.String())
}

// manyProperties writes types hint types of props integer parameters
// each, and no rules.
func manyProperties(types, props int) []byte {
	return hintTypes(types, func(b *strings.Builder, t int) {
		fmt.Fprintf(b, "  - type: h%d\n    parameters:\n      type: object\n      properties:\n", t)
		for p := range props {
			fmt.Fprintf(b, "        p%d: {type: integer, minimum: 0, maximum: 100, default: 1}\n", p)
		}
	})
}
