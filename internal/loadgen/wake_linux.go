package loadgen

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// waker lets the pacer wake an idle sender without going through Go's
// scheduler. A goroutine woken through a channel is queued on the waker's
// own P, to run next; but the pacer keeps its P through its raw sleeps, so
// the woken sender would wait there until another P steals it, which Go
// does only after a pause (some 50 µs with a thread's default timer
// slack), and that wait would be counted in every booking's latency. Here
// the sender waits on an eventfd, in the network poller, and the pacer
// writes the eventfd with a raw system call: the poller hands the sender
// to whichever P is idle at once, as it hands over a socket that became
// readable.
type waker struct {
	fd  int
	f   *os.File
	buf [8]byte
}

func newWaker() (*waker, error) {
	fd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("eventfd: %w", errno)
	}
	// A non-blocking descriptor joins the network poller.
	return &waker{fd: int(fd), f: os.NewFile(fd, "loadgen-wake")}, nil
}

// wake makes a wait return; it never blocks and keeps the caller's P.
func (w *waker) wake() {
	one := uint64(1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(w.fd), uintptr(unsafe.Pointer(&one)), 8)
}

// wait returns once wake was called since the last wait.
func (w *waker) wait() error {
	_, err := w.f.Read(w.buf[:])
	return err
}

func (w *waker) close() error { return w.f.Close() }
