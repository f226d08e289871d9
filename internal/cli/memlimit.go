package cli

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/go-logr/logr"
)

// MemoryLimitEnv names the container's memory limit in bytes, as the
// downward API gives it (resourceFieldRef limits.memory; config/router).
const MemoryLimitEnv = "KVHINT_MEMORY_LIMIT"

// DefaultMemoryLimitFraction is the part of the container's memory limit
// the Go runtime is held to (GOMEMLIMIT). The limit is soft: under a burst
// of allocation the collector, held to half the CPU, lets the heap pass it
// (256 concurrent 47,000-hash bookings took RSS 40 MiB over a limit of
// 0.8), and RSS also holds what the runtime has not returned yet; 0.7
// leaves that room before the kernel's OOM kill.
const DefaultMemoryLimitFraction = 0.7

// setMemoryLimit sets the Go memory limit to fraction of the container's
// limit, read from MemoryLimitEnv, unless GOMEMLIMIT is set: an explicit
// GOMEMLIMIT wins. Without the variable (outside a pod, or a pod without a
// memory limit, where the downward API gives the node's allocatable
// memory) the limit is left as it is when it is absent, and an unreadable
// one is an error.
func setMemoryLimit(log logr.Logger, fraction float64) error {
	if fraction <= 0 || fraction > 1 {
		return fmt.Errorf("--memory-limit-fraction %v: want a fraction over 0 and at most 1", fraction)
	}
	raw := os.Getenv(MemoryLimitEnv)
	if raw == "" {
		return nil
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("GOMEMLIMIT is set; the container's memory limit is not used for it", "GOMEMLIMIT", v, MemoryLimitEnv, raw)
		return nil
	}
	limit, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || limit <= 0 {
		return fmt.Errorf("%s=%q: want the container's memory limit in bytes (the downward API's resourceFieldRef limits.memory)", MemoryLimitEnv, raw)
	}
	goLimit := int64(math.Floor(float64(limit) * fraction))
	debug.SetMemoryLimit(goLimit)
	log.Info("Set the Go memory limit from the container's", "containerLimit", limit, "fraction", fraction, "goMemoryLimit", goLimit)
	return nil
}
