// Package memlimit holds the Go runtime to a part of the container's
// memory limit (GOMEMLIMIT), read from the variable the downward API
// fills, for the sidecar. It imports logr and apimachinery's quantities.
package memlimit

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Env names the container's memory limit in bytes, as the
// downward API gives it (resourceFieldRef limits.memory; config/router).
const Env = "KVHINT_MEMORY_LIMIT"

// DefaultFraction is the part of the container's memory limit
// the Go runtime is held to (GOMEMLIMIT). The limit is soft: under a burst
// of allocation the collector, held to half the CPU, lets the heap pass it
// (256 concurrent 47,000-hash bookings took RSS 40 MiB over a limit of
// 0.8), and RSS also holds what the runtime has not returned yet; 0.7
// leaves that room before the kernel's OOM kill.
const DefaultFraction = 0.7

// Floor is the least container memory limit taken: below it the
// value is almost surely in the wrong unit (a resourceFieldRef with a
// divisor gives 256 for 256Mi), and the Go runtime held to a few hundred
// bytes collects without end.
const Floor = 16 << 20

// unitMistake names the unit a too-small limit was likely written in: the
// smallest divisor that brings it to the floor.
func unitMistake(limit int64) string {
	for _, u := range []struct {
		suffix, name string
		mult         int64
	}{{"Ki", "kibibytes", 1 << 10}, {"Mi", "mebibytes", 1 << 20}, {"Gi", "gibibytes", 1 << 30}} {
		if limit*u.mult >= Floor {
			return fmt.Sprintf("did you mean %s? a resourceFieldRef divisor of 1%s yields %s; leave the divisor out (1, bytes)",
				resource.NewQuantity(limit*u.mult, resource.BinarySI), u.suffix, u.name)
		}
	}
	return "want the container's memory limit in bytes (the downward API's resourceFieldRef limits.memory, no divisor)"
}

// Set sets the Go memory limit to fraction of the container's
// limit, read from Env, unless GOMEMLIMIT is set: an explicit
// GOMEMLIMIT wins. Without the variable (outside a pod, or a pod without a
// memory limit, where the downward API gives the node's allocatable
// memory) the limit is left as it is when it is absent, and an unreadable
// one is an error.
func Set(log logr.Logger, fraction float64) error {
	if fraction <= 0 || fraction > 1 {
		return fmt.Errorf("--memory-limit-fraction %v: want a fraction over 0 and at most 1", fraction)
	}
	raw := os.Getenv(Env)
	if raw == "" {
		return nil
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("GOMEMLIMIT is set; the container's memory limit is not used for it", "GOMEMLIMIT", v, Env, raw)
		return nil
	}
	limit, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || limit <= 0 {
		return fmt.Errorf("%s=%q: want the container's memory limit in bytes (the downward API's resourceFieldRef limits.memory)", Env, raw)
	}
	if limit < Floor {
		return fmt.Errorf("%s=%d is %d bytes, below the floor of 16Mi: %s", Env, limit, limit, unitMistake(limit))
	}
	goLimit := int64(math.Floor(float64(limit) * fraction))
	debug.SetMemoryLimit(goLimit)
	log.Info("Set the Go memory limit from the container's", "containerLimit", limit, "fraction", fraction, "goMemoryLimit", goLimit)
	return nil
}
