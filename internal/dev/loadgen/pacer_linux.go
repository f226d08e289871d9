package loadgen

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
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

// sleepUntil returns at t, or a few tens of microseconds after. Go's own
// timers may fire up to a millisecond late when the process is otherwise
// idle, so the last stretch is slept in nanosleep(2) on the pinned thread,
// made as a raw system call: through syscall.Nanosleep the runtime would
// hand the thread's P to another thread whenever a sleep outlasts sysmon's
// 20 µs tick, which costs more thread switches than the sleep itself. A
// raw sleep keeps the P, so it is cut into pieces of at most rawSleepMax
// for garbage collection not to wait on it, and a long wait is slept on
// Go's timers first. It aims a little early, by the wake-up latency a
// virtual machine typically adds; a send made early is timed from the send
// itself.
func sleepUntil(t time.Time) {
	const (
		early       = 20 * time.Microsecond
		rawSleepMax = 200 * time.Microsecond
		coarseSlack = 2 * time.Millisecond
	)
	d := time.Until(t) - early
	if d > coarseSlack {
		time.Sleep(d - coarseSlack)
		d = time.Until(t) - early
	}
	for d > 0 {
		ts := syscall.NsecToTimespec(int64(min(d, rawSleepMax)))
		syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		d = time.Until(t) - early
	}
}
