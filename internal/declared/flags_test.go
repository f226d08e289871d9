package declared

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestLimitsFlags: the flags default to the limits given, take
// quantities, and refuse a negative one or one that is not a quantity.
func TestLimitsFlags(t *testing.T) {
	l := DefaultLimits()
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	l.AddFlags(fs)
	if got, want := fs.Lookup("catalog-max-memory-total").DefValue, Bytes(DefaultLimits().TotalBytes); got != want {
		t.Errorf("--catalog-max-memory-total defaults to %q, want %q", got, want)
	}
	if err := fs.Parse([]string{"--catalog-max-memory-total=64Mi", "--catalog-max-bytes=1Ki", "--catalog-max-rules=9", "--catalog-memory-reserve=0"}); err != nil {
		t.Fatal(err)
	}
	if l.TotalBytes != 64<<20 || l.Budget.DocumentBytes != 1024 || l.Budget.Rules != 9 || l.ReserveBytes != 0 {
		t.Errorf("parsed limits %+v", l)
	}
	for arg, want := range map[string]string{
		"--catalog-max-memory=-1Mi":                 "not a negative one",
		"--catalog-max-memory-per-namespace=lots":   "want a quantity of bytes such as 8Mi",
		"--catalog-memory-floor-per-namespace=1.5x": "want a quantity of bytes such as 8Mi",
	} {
		if err := fs.Parse([]string{arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", arg, err, want)
		}
	}
}
