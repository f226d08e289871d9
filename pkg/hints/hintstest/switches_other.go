//go:build !linux

package hintstest

import "time"

// threadUsage is not available off Linux: the blocking check is then
// skipped.
func threadUsage() (int64, time.Duration, bool) { return 0, 0, false }
