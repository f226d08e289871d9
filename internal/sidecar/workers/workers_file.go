package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/filewatch"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/jsonbody"
)

// maxWorkersFileBytes caps a workers file.
const maxWorkersFileBytes = 4 << 20

// WorkersFile is the standalone list of workers, YAML or JSON: a mapping
// whose workers key holds the list,
//
//	workers:
//	  - id: decode-0
//	    capabilities: [router_hint]
//	    hint_endpoint: http://127.0.0.1:9001/v1/hints
//	    worker_type: decode
//
// or the list itself, without the key.
type WorkersFile struct {
	Workers []WorkerSpec `json:"workers"`
}

// ParseWorkersFile reads a workers file strictly: unknown keys and invalid
// workers are errors, every invalid worker named. The file is a mapping
// with a workers key, or a bare list of workers.
func ParseWorkersFile(data []byte) ([]WorkerSpec, error) {
	specs, err := decodeWorkersFile(data)
	if err != nil {
		return nil, err
	}
	// Every bad entry is named, not only the first: the file is refused
	// whole, and whoever fixes it should see all there is to fix.
	var errs []error
	for i := range specs {
		if err := specs[i].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("workers[%d]: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return specs, nil
}

// decodeWorkersFile reads a workers file's structure strictly, without
// checking the workers.
func decodeWorkersFile(data []byte) ([]WorkerSpec, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	js = bytes.TrimSpace(js)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var f WorkersFile
	switch {
	case len(js) > 0 && js[0] == '[':
		err = dec.Decode(&f.Workers)
	case len(js) > 0 && js[0] == '{':
		err = dec.Decode(&f)
	default:
		return nil, fmt.Errorf("a workers file holds a mapping with a workers key, or a list of workers; this one holds %s", shorten(js))
	}
	if err != nil {
		return nil, describeFileError(err)
	}
	return f.Workers, nil
}

// describeFileError says what is wrong with a workers file's contents, in
// the words of a file rather than of a request body.
func describeFileError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("workers file: %s: got %s, want %s", te.Field, te.Value, jsonbody.KindOf(te.Type))
	}
	return fmt.Errorf("workers file: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// shorten cuts a file's text for a message.
func shorten(js []byte) string {
	if len(js) == 0 {
		return "nothing"
	}
	if len(js) > 40 {
		return string(js[:37]) + "..."
	}
	return string(js)
}

// FileSource keeps the registry's file workers equal to a file's
// list, rereading it on change like the config file. A file that cannot be
// read or parsed, or has a bad entry, is refused whole and leaves the
// workers registered from it before; the error names every bad entry.
// Until one file has loaded, Ready says why not: a sidecar that started
// with a bad file has no workers and must not say it is ready.
type FileSource struct {
	Path string
	Poll time.Duration

	// loaded is set once a file has loaded; why is the last refusal.
	loaded atomic.Bool
	why    atomic.Pointer[string]
}

// Ready reports whether a workers file has loaded, for /readyz.
func (s *FileSource) Ready() error {
	if s.loaded.Load() {
		return nil
	}
	if why := s.why.Load(); why != nil {
		return fmt.Errorf("workers file %s not loaded: %s", s.Path, *why)
	}
	return fmt.Errorf("workers file %s not loaded yet", s.Path)
}

// Run loads the file into reg until ctx is done.
func (s *FileSource) Run(ctx context.Context, reg *Registry, log logr.Logger) {
	path := filepath.Clean(s.Path)
	log = log.WithValues("workersFile", path)
	var lastErr string
	var last []byte
	filewatch.Watch(ctx, path, s.Poll, log, func() {
		data, err := filewatch.ReadLimited(path, maxWorkersFileBytes)
		if err == nil && bytes.Equal(data, last) {
			return
		}
		var specs []WorkerSpec
		if err == nil {
			specs, err = decodeWorkersFile(data)
		}
		if err == nil {
			// Replace checks every worker, under the registry's endpoint
			// rules too, and names each bad one.
			err = reg.Replace(SourceFile, specs)
		}
		if err != nil && err.Error() != lastErr {
			// An invalid worker (a worker_type other than aggregated,
			// prefill or decode, say) refuses the whole file: counted
			// once per distinct error, like the log below.
			reg.countRefused(SourceFile)
		}
		if err != nil {
			if err.Error() != lastErr {
				log.Error(err, "Cannot load the workers file; keeping the workers it gave before")
				lastErr = err.Error()
				why := lastErr
				s.why.Store(&why)
			}
			return
		}
		last, lastErr = data, ""
		s.loaded.Store(true)
		log.Info("Loaded workers file", "workers", len(specs))
	})
}
