package hintstest

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// threadUsage returns how often the calling thread has given up the CPU of
// its own accord (slept, waited, blocked on I/O) and the CPU time it has
// used, and false where they are not available.
func threadUsage() (voluntary int64, cpu time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, 0, false
	}
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return ru.Nvcsw, cpu, true
}
