package router

import "syscall"

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// threadSwitches returns the calling thread's voluntary and involuntary
// context switches so far (getrusage(RUSAGE_THREAD), about 0.3 µs).
func threadSwitches() (voluntary, involuntary int64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, 0, false
	}
	return ru.Nvcsw, ru.Nivcsw, true
}
