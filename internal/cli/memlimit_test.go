package cli

import (
	"math"
	"runtime/debug"
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

	t.Setenv(MemoryLimitEnv, "268435456")
	if err := setMemoryLimit(logr.Discard(), DefaultMemoryLimitFraction); err != nil {
		t.Fatal(err)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(math.Floor(268435456*DefaultMemoryLimitFraction)); got != want {
		t.Errorf("memory limit %d, want %d", got, want)
	}

	debug.SetMemoryLimit(prev)
	t.Setenv("GOMEMLIMIT", "100MiB")
	if err := setMemoryLimit(logr.Discard(), DefaultMemoryLimitFraction); err != nil {
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
		t.Setenv(MemoryLimitEnv, tc.env)
		if err := setMemoryLimit(logr.Discard(), tc.fraction); err == nil {
			t.Errorf("%s=%q, fraction %v: no error", MemoryLimitEnv, tc.env, tc.fraction)
		}
	}
	t.Setenv(MemoryLimitEnv, "")
	if err := setMemoryLimit(logr.Discard(), DefaultMemoryLimitFraction); err != nil || debug.SetMemoryLimit(-1) != prev {
		t.Errorf("without %s: %v, limit %d", MemoryLimitEnv, err, debug.SetMemoryLimit(-1))
	}
}
