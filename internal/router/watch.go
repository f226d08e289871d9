package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	core "github.com/kvrouter/kv-hint-operator/pkg/router"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
	"k8s.io/apimachinery/pkg/labels"
)

// DefaultPollInterval is how often a watched file is reread whatever the
// file-system events say.
const DefaultPollInterval = 10 * time.Second

// settleDelay coalesces the burst of events one update makes: kubelet's
// swap of a mounted ConfigMap is a directory write, a symlink create and a
// rename, microseconds apart.
const settleDelay = 20 * time.Millisecond

// watchFile calls load once at start, then whenever something changes in
// the file's directory, and every poll interval regardless, until ctx is
// done.
//
// It watches the directory, not the file: kubelet updates a mounted
// ConfigMap by writing a new timestamped directory and renaming the ..data
// symlink over the old one, so the file's own inode never changes and a
// watch on it would see nothing (or lose it at the first swap). Polling
// covers what inotify misses: an overflowed event queue, file systems that
// send no events, and a directory that appears after start.
func watchFile(ctx context.Context, path string, poll time.Duration, log logr.Logger, load func()) {
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

// readLimited reads a file, refusing one over limit bytes before reading it
// whole.
func readLimited(path string, limit int64) ([]byte, error) {
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

// FileSource loads a hints config from a file, reloading it on every
// change (fsnotify on its directory, and a poll as a fallback).
//
// With Dir set, the file is a mounted compiled ConfigMap: Dir/hints.yaml
// and Dir/roles.yaml, read together and loaded as one unit (the pools go
// to OnWorkerSelectors only when the config loads). Kubelet swaps both
// files at once through its ..data symlink. With Path set, the file is a
// policy file on its own, run under the dispatcher's --router-mode.
type FileSource struct {
	// Path is a policy file (standalone use).
	Path string
	// Dir is a mounted compiled ConfigMap directory.
	Dir  string
	Poll time.Duration
	// OnWorkerSelectors receives the roles' worker selectors of a Dir
	// after every successful load.
	OnWorkerSelectors func(map[string]labels.Selector)
}

// DirSource is a FileSource for a mounted compiled ConfigMap directory.
func DirSource(dir string, poll time.Duration) FileSource {
	return FileSource{Dir: filepath.Clean(dir), Poll: poll}
}

// Run loads the file into d on every change until ctx is done.
func (s FileSource) Run(ctx context.Context, d *core.Dispatcher, log logr.Logger) {
	if s.Dir != "" {
		s.runDir(ctx, d, log)
		return
	}
	path := filepath.Clean(s.Path)
	log = log.WithValues("path", path)
	watchFile(ctx, path, s.Poll, log, func() {
		data, err := readLimited(path, hintsconfig.MaxConfigBytes)
		if err != nil {
			d.RecordSourceError(path, fmt.Errorf("%w: %w", core.ErrConfigRejected, err))
			return
		}
		_ = d.Load(data, path) // Load logs and counts its own errors
	})
}

func (s FileSource) runDir(ctx context.Context, d *core.Dispatcher, log logr.Logger) {
	log = log.WithValues("dir", s.Dir)
	watchFile(ctx, filepath.Join(s.Dir, compiled.RolesKey), s.Poll, log, func() {
		// Kubelet publishes a ConfigMap volume as a timestamped directory
		// behind the ..data symlink, and swaps the link. Both files are
		// read from the one directory it points at now, so a swap between
		// the two reads cannot pair files of two versions.
		dir := s.Dir
		if real, err := filepath.EvalSymlinks(filepath.Join(s.Dir, "..data")); err == nil {
			dir = real
		}
		data := map[string]string{}
		for _, key := range []string{compiled.PolicyKey, compiled.RolesKey} {
			b, err := readLimited(filepath.Join(dir, key), hintsconfig.MaxConfigBytes)
			switch {
			case errors.Is(err, fs.ErrNotExist) && key == compiled.PolicyKey:
				// No role is accepted: the ConfigMap holds the role
				// settings alone.
			case err != nil:
				d.RecordSourceError(s.Dir, fmt.Errorf("%w: %w", core.ErrConfigRejected, err))
				return
			default:
				data[key] = string(b)
			}
		}
		loadCompiled(d, data, s.Dir, s.OnWorkerSelectors)
	})
}
