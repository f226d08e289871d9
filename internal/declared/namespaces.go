package declared

import (
	"fmt"
	"slices"
	"strings"
)

// Namespaces returns the namespaces declared catalogs are read
// from: the manager's (namespaces), narrowed to the chosen ones; none for
// all. A chosen namespace the manager does not watch is an error.
func Namespaces(namespaces, chosen []string) ([]string, error) {
	if len(chosen) == 0 {
		return namespaces, nil
	}
	if len(namespaces) == 0 {
		return chosen, nil
	}
	var out []string
	for _, ns := range chosen {
		if slices.Contains(namespaces, ns) {
			out = append(out, ns)
		} else {
			return nil, fmt.Errorf("--catalog-namespace %s: not a namespace the manager watches (--namespace %s)", ns, strings.Join(namespaces, ","))
		}
	}
	return out, nil
}
