// Package configsource feeds the dispatcher its config: a policy file on
// its own, a mounted compiled ConfigMap directory (both files read from the
// one directory kubelet's ..data points at), or a ConfigMap watched through
// the API. Every source validates before it swaps and keeps the last good
// config; a compiled config and its worker pools load as one unit.
//
// A compiled ConfigMap that stages a rollout's candidate (compiled.Split)
// hands the candidate to a Candidates (package stage), after the stable
// config, and reports both in a rolloutapi.ConfigStatus.
//
// It imports pkg/dispatch (Dispatcher.Load and LoadConfig), pkg/hintsconfig,
// internal/compiled (the ConfigMap's format), internal/rolloutapi,
// internal/apiwatch, filewatch and client-go; nothing else of the sidecar.
package configsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/filewatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// FileSource loads a hints config from a file, reloading it on every
// change (fsnotify on its directory, and a poll as a fallback).
//
// With Dir set, the file is a mounted compiled ConfigMap: Dir/hints.yaml
// and Dir/roles.yaml, read together and loaded as one unit with their
// pools (see compiledLoader). Kubelet swaps both
// files at once through its ..data symlink. With Path set, the file is a
// policy file on its own, run under the dispatcher's --router-mode.
type FileSource struct {
	// Path is a policy file (standalone use).
	Path string
	// Dir is a mounted compiled ConfigMap directory.
	Dir  string
	Poll time.Duration
	// OnWorkerSelectors receives the roles' worker selectors of a Dir with
	// every load, as compiledLoader says.
	OnWorkerSelectors func(map[string]labels.Selector)
	// Candidates, OnCandidateWorkerSelectors and OnStatus are
	// ConfigMapSource's, for a Dir: its candidate.* files and rollout.json
	// stage a candidate.
	Candidates                 Candidates
	OnCandidateWorkerSelectors func(map[string]labels.Selector)
	OnStatus                   func(rolloutapi.ConfigStatus)
}

// DirSource is a FileSource for a mounted compiled ConfigMap directory.
func DirSource(dir string, poll time.Duration) FileSource {
	return FileSource{Dir: filepath.Clean(dir), Poll: poll}
}

// Run loads the file into d on every change until ctx is done.
func (s FileSource) Run(ctx context.Context, d *dispatch.Dispatcher, log logr.Logger) {
	if s.Dir != "" {
		s.runDir(ctx, d, log)
		return
	}
	path := filepath.Clean(s.Path)
	log = log.WithValues("path", path)
	filewatch.Watch(ctx, path, s.Poll, log, func() {
		data, err := filewatch.ReadLimited(path, hintsconfig.MaxConfigBytes)
		if err != nil {
			d.RecordSourceError(path, fmt.Errorf("%w: %w", dispatch.ErrConfigRejected, err))
			return
		}
		_ = d.Load(data, path) // Load logs and counts its own errors
	})
}

// dirKeys are the files of a mounted compiled ConfigMap: the stable
// config's, the rollout's stage and the candidate's.
var dirKeys = []string{compiled.PolicyKey, compiled.RolesKey, compiled.FormKey, compiled.StageKey,
	compiled.CandidatePrefix + compiled.PolicyKey, compiled.CandidatePrefix + compiled.RolesKey, compiled.CandidatePrefix + compiled.FormKey}

func (s FileSource) runDir(ctx context.Context, d *dispatch.Dispatcher, log logr.Logger) {
	log = log.WithValues("dir", s.Dir)
	loader := compiledLoader{candidates: s.Candidates, onCandidatePools: s.OnCandidateWorkerSelectors, onStatus: s.OnStatus}
	filewatch.Watch(ctx, filepath.Join(s.Dir, compiled.RolesKey), s.Poll, log, func() {
		// Kubelet publishes a ConfigMap volume as a timestamped directory
		// behind the ..data symlink, and swaps the link. Both files are
		// read from the one directory it points at now, so a swap between
		// the two reads cannot pair files of two versions.
		dir := s.Dir
		if real, err := filepath.EvalSymlinks(filepath.Join(s.Dir, "..data")); err == nil {
			dir = real
		}
		data := map[string]string{}
		for _, key := range dirKeys {
			b, err := filewatch.ReadLimited(filepath.Join(dir, key), hintsconfig.MaxConfigBytes)
			switch {
			case errors.Is(err, fs.ErrNotExist) && key != compiled.RolesKey:
				// No policy file: no role is accepted, the ConfigMap holds
				// the role settings alone. No form: the policy file is in
				// the default form. No stage or candidate: no rollout
				// runs.
			case err != nil:
				loader.sourceError(d, s.Dir, fmt.Errorf("%w: %w", dispatch.ErrConfigRejected, err))
				return
			default:
				data[key] = string(b)
			}
		}
		loader.load(d, data, s.Dir, s.OnWorkerSelectors)
	})
}
