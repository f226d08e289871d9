//go:build !linux

package loadgen

// waker wakes an idle sender. Off Linux the pacer sleeps on Go's timers,
// giving up its P, so a channel does.
type waker struct{ c chan struct{} }

func newWaker() (*waker, error) { return &waker{c: make(chan struct{}, 1)}, nil }

func (w *waker) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *waker) wait() error {
	<-w.c
	return nil
}

func (w *waker) close() error { return nil }
