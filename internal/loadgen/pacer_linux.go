package loadgen

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack and prGetTimerSlack are prctl(2) options.
const (
	prSetTimerSlack = 29
	prGetTimerSlack = 30
)

// pinPacer locks the pacer to its OS thread and narrows the thread's timer
// slack to 1 µs, so that sleepUntil wakes close to the due time; the
// returned function restores both.
func pinPacer() (unpin func()) {
	runtime.LockOSThread()
	old, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerSlack, 0, 0)
	if errno == 0 {
		syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1000, 0)
	}
	return func() {
		if errno == 0 {
			syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, old, 0)
		}
		runtime.UnlockOSThread()
	}
}

// sleepUntil returns at t, or a few tens of microseconds after: it sleeps
// in nanosleep(2) on the pinned thread, as Go's timers may fire up to a
// millisecond late when the process is otherwise idle. It aims a little
// early, by the wake-up latency a virtual machine typically adds; a send
// made early is timed from the send itself.
func sleepUntil(t time.Time) {
	const early = 20 * time.Microsecond
	d := time.Until(t) - early
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
