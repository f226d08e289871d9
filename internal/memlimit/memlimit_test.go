package memlimit

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// TestSetMemoryLimit: the Go memory limit is the fraction of the
// container's limit; an explicit GOMEMLIMIT wins; a bad value or fraction
// is an error naming it; without the variable nothing changes.
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")

	t.Setenv(Env, "268435456")
	if err := Set(logr.Discard(), DefaultFraction); err != nil {
		t.Fatal(err)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(math.Floor(268435456*DefaultFraction)); got != want {
		t.Errorf("memory limit %d, want %d", got, want)
	}

	debug.SetMemoryLimit(prev)
	t.Setenv("GOMEMLIMIT", "100MiB")
	if err := Set(logr.Discard(), DefaultFraction); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Errorf("with GOMEMLIMIT set the limit became %d", got)
	}
	t.Setenv("GOMEMLIMIT", "")

	for _, tc := range []struct {
		env      string
		fraction float64
	}{{"256Mi", 0.7}, {"0", 0.7}, {"268435456", 0}, {"268435456", 1.5}} {
		t.Setenv(Env, tc.env)
		if err := Set(logr.Discard(), tc.fraction); err == nil {
			t.Errorf("%s=%q, fraction %v: no error", Env, tc.env, tc.fraction)
		}
	}
	t.Setenv(Env, "")
	if err := Set(logr.Discard(), DefaultFraction); err != nil || debug.SetMemoryLimit(-1) != prev {
		t.Errorf("without %s: %v, limit %d", Env, err, debug.SetMemoryLimit(-1))
	}
}

// TestMemoryLimitFloor: a container limit below Floor is the
// mistake of a resourceFieldRef divisor (256 for 256Mi with divisor 1Mi,
// 262144 with 1Ki) and is refused with the likely unit named, never
// taken as a limit of a few bytes.
func TestMemoryLimitFloor(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")
	for _, tc := range []struct{ env, want string }{
		{"256", "KVHINT_MEMORY_LIMIT=256 is 256 bytes, below the floor of 16Mi: did you mean 256Mi? a resourceFieldRef divisor of 1Mi yields mebibytes; leave the divisor out (1, bytes)"},
		{"262144", "did you mean 256Mi? a resourceFieldRef divisor of 1Ki yields kibibytes"},
		{"1", "did you mean 1Gi? a resourceFieldRef divisor of 1Gi yields gibibytes"},
	} {
		t.Setenv(Env, tc.env)
		err := Set(logr.Discard(), DefaultFraction)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v\nwant %q", Env, tc.env, err, tc.want)
		}
		if got := debug.SetMemoryLimit(-1); got != prev {
			t.Errorf("%s=%s: the Go memory limit became %d", Env, tc.env, got)
		}
	}
	t.Setenv(Env, "16777216")
	if err := Set(logr.Discard(), DefaultFraction); err != nil {
		t.Errorf("16Mi, the floor: %v", err)
	}
}
