// Package filewatch rereads a file on every change: fsnotify on its
// directory (which is what a kubelet ConfigMap swap changes), and a poll as
// a fallback. The config sources and the workers file use it.
//
// It imports only the standard library, fsnotify and logr.
package filewatch

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// DefaultPollInterval is how often a watched file is reread whatever the
// file-system events say.
const DefaultPollInterval = 10 * time.Second

// settleDelay coalesces the burst of events one update makes: kubelet's
// swap of a mounted ConfigMap is a directory write, a symlink create and a
// rename, microseconds apart.
const settleDelay = 20 * time.Millisecond

// Watch calls load once at start, then whenever something changes in
// the file's directory, and every poll interval regardless, until ctx is
// done.
//
// It watches the directory, not the file: kubelet updates a mounted
// ConfigMap by writing a new timestamped directory and renaming the ..data
// symlink over the old one, so the file's own inode never changes and a
// watch on it would see nothing (or lose it at the first swap). Polling
// covers what inotify misses: an overflowed event queue, file systems that
// send no events, and a directory that appears after start.
func Watch(ctx context.Context, path string, poll time.Duration, log logr.Logger, load func()) {
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	dir := filepath.Dir(path)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Error(err, "Cannot watch for file changes; polling only", "dir", dir, "interval", poll)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	watching := false
	watch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(dir); err != nil {
			log.V(1).Info("Directory not watchable yet; polling", "dir", dir, "error", err.Error())
			return
		}
		watching = true
	}

	watch()
	load()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	settle := time.NewTimer(settleDelay)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Clean(ev.Name) == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went away; the poll re-adds it.
				watching = false
			}
			settle.Reset(settleDelay)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Usually an event-queue overflow: reread to be sure.
			log.Error(err, "File watch error; rereading", "dir", dir)
			settle.Reset(settleDelay)
		case <-settle.C:
			load()
		case <-ticker.C:
			watch()
			load()
		}
	}
}

// ReadLimited reads a file, refusing one over limit bytes before reading it
// whole.
func ReadLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is over the %d-byte limit", path, limit)
	}
	return data, nil
}
