//go:build unix

package delivery

import (
	"math"
	"syscall"
)

// openFileLimit is the soft RLIMIT_NOFILE: the Go runtime has raised it to
// the hard limit at start, so it is what the process may open.
func openFileLimit() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == math.MaxUint64 || rl.Cur > math.MaxInt32 {
		return 0, false
	}
	return int(rl.Cur), true
}
