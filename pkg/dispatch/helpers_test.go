package dispatch

import (
	"sync"
	"time"
)

// workerMap is a registry of test workers.
type workerMap map[string]Worker

func (m workerMap) Lookup(id string) Worker {
	if w, ok := m[id]; ok {
		return w
	}
	return nil
}

// chanWorker is a hint-capable worker whose delivery is a bounded queue
// drained by its own goroutine, like the sidecar's: Deliver never waits and
// refuses a hint when the queue is full.
type chanWorker struct {
	ch   chan []byte
	mu   sync.Mutex
	got  int
	done chan struct{}
}

func newChanWorker(size int) *chanWorker {
	w := &chanWorker{ch: make(chan []byte, size), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// Messages are counted and dropped, as the sidecar's sender drops
		// them once posted: keeping them would grow the heap the
		// benchmarks' garbage collections scan.
		for range w.ch {
			w.mu.Lock()
			w.got++
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *chanWorker) HintCapable() bool                 { return true }
func (w *chanWorker) InPool(string) bool                { return true }
func (w *chanWorker) SourceEndpoint(int) (string, bool) { return "", false }

func (w *chanWorker) Deliver(msg []byte, _ time.Time) bool {
	select {
	case w.ch <- msg:
		return true
	default:
		return false
	}
}

// close stops the worker once its queue has drained.
func (w *chanWorker) close() {
	close(w.ch)
	<-w.done
}
