package router

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
	got  [][]byte
	done chan struct{}
}

func newChanWorker(size int) *chanWorker {
	w := &chanWorker{ch: make(chan []byte, size), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for msg := range w.ch {
			w.mu.Lock()
			if len(w.got) < 1024 {
				w.got = append(w.got, msg)
			}
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

// received returns the hints delivered so far, once the queue has drained.
func (w *chanWorker) close() {
	close(w.ch)
	<-w.done
}
