package delivery

import (
	"errors"
	"net"
	"syscall"
)

// peekClosed asks the kernel, without waiting, whether an idle connection
// has been closed or written to by the peer: a non-blocking MSG_PEEK reads
// EOF, data or an error at once, and EAGAIN when the connection is open and
// silent. Unlike a read with a short deadline, it cannot be fooled by the
// sender being descheduled past the deadline. ok is false where the
// connection has no file descriptor to ask.
func peekClosed(nc net.Conn) (closed, ok bool) {
	sc, isSC := nc.(syscall.Conn)
	if !isSC {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readiness
	})
	switch {
	case err != nil:
		return true, true
	case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EWOULDBLOCK):
		return false, true
	default:
		// EOF, a reset, or data the worker sent unasked: each makes the
		// connection unfit for the next hint.
		return true, true
	}
}
