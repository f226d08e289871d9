package declared

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNamespaces: declared catalogs are read in the manager's namespaces,
// narrowed to the chosen ones; a chosen one outside them is refused,
// naming the flags.
func TestNamespaces(t *testing.T) {
	for _, tc := range []struct {
		watched, chosen, want []string
	}{
		{nil, nil, nil},
		{[]string{"a", "b"}, nil, []string{"a", "b"}},
		{nil, []string{"c"}, []string{"c"}},
		{[]string{"a", "b"}, []string{"b"}, []string{"b"}},
	} {
		got, err := Namespaces(tc.watched, tc.chosen)
		if err != nil || !cmp.Equal(tc.want, got) {
			t.Errorf("Namespaces(%v, %v) = %v, %v; want %v", tc.watched, tc.chosen, got, err, tc.want)
		}
	}
	_, err := Namespaces([]string{"a", "b"}, []string{"b", "c"})
	if err == nil || !strings.Contains(err.Error(), "--catalog-namespace c") || !strings.Contains(err.Error(), "--namespace a,b") {
		t.Errorf("a namespace the manager does not watch: %v", err)
	}
}
