package dispatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// ErrConfigRejected wraps the reasons a hints config was refused; the config
// in force, if any, stays.
var ErrConfigRejected = errors.New("hints config rejected")

// Load validates a policy file (a hints YAML document) with the rules the
// operator and the CLI use, every role under Options.RouterMode, and on
// success makes it the config in force, atomically: bookings that already
// began finish on the snapshot they loaded. On any error the previous
// config stays in force; the error is logged and counted.
//
// Loading the document in force again is a no-op, so a poller may call Load
// with whatever it reads; after a failure it counts as a successful load
// (the source was reverted). origin names the source in logs (a path, a
// ConfigMap).
func (d *Dispatcher) Load(doc []byte, origin string) error {
	return d.LoadConfig(Config{Doc: doc, Modes: hintsconfig.Modes{Default: d.mode, Flag: "--router-mode"}}, origin)
}

// Config is one config to load: a policy file, the router mode of each of
// its roles and the hash it is known by.
type Config struct {
	// Doc is the policy file. Nil is a config with no role, which only
	// LoadConfig takes: a compiled ConfigMap holds no policy file while
	// no role of its router is accepted.
	Doc []byte
	// Modes are the roles' router modes.
	Modes hintsconfig.Modes
	// Hash is what the config is known by (reported, compared); empty
	// means hintsconfig.ContentHash(Doc). A compiled ConfigMap's hash
	// covers the role settings as well.
	Hash string
	// Form is the policy file's form (hintsconfig.Form); empty reads it
	// from the file, as hintsconfig.ParseConfig does. A compiled
	// ConfigMap says its form beside the file.
	Form hintsconfig.Form
}

// LoadConfig is Load for a config whose modes and hash come with it, such
// as a compiled ConfigMap's.
func (d *Dispatcher) LoadConfig(c Config, origin string) error {
	doc := c.Doc
	hash := c.Hash
	if hash == "" {
		hash = hintsconfig.ContentHash(doc)
	}
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	if cur := d.snap.Load(); cur != nil && cur.hash == hash {
		if d.lastRejects != "" {
			// The source is back to the config in force after a refused
			// document or a source error (a revert): the last load
			// succeeded, and that refused document, should it come back,
			// is a new failure to count and log.
			d.lastRejects = ""
			d.metrics.ConfigLoaded(hash, hash, time.Now())
			d.log.Info("Hints config source is back to the config in force", "source", origin, "hash", hash)
		}
		return nil
	}
	g, warnings, err := compileDoc(d.cat, doc, c.Form, c.Modes)
	if err != nil {
		err = fmt.Errorf("%w (%s, hash %s): %w", ErrConfigRejected, origin, hash, err)
		d.recordFailure(hash, origin, err)
		return err
	}
	now := time.Now()
	keep := map[string]bool{}
	next := newSnapshot(g, doc, hash, d.metrics, d.iso, keep, now)
	prev := d.snap.Swap(next)
	d.iso.retire(keep)
	d.lastRejects = ""
	prevHash := ""
	if prev != nil {
		forgetRemoved(d.metrics, prev, next)
		prevHash = prev.hash
	}
	d.metrics.ConfigLoaded(hash, prevHash, now)
	d.log.Info("Applied hints config", "source", origin, "hash", hash, "previousHash", prevHash, "roles", len(g.Roles))
	for _, w := range warnings {
		d.log.Info("Hints config warning", "hash", hash, "warning", w.Error())
	}
	for _, f := range d.onApply {
		f(hash)
	}
	return nil
}

// recordFailure records a failed load once per distinct key (a document's
// hash, a source error): a poller rereading the same broken file every few
// seconds is one failure, not a growing count, and one log line. The caller
// holds loadMu.
func (d *Dispatcher) recordFailure(key, origin string, err error) {
	if d.lastRejects == key {
		return
	}
	d.lastRejects = key
	d.metrics.ConfigFailed(time.Now())
	inForce := d.ConfigHash()
	if inForce == "" {
		inForce = "none (not ready)"
	}
	d.log.Error(err, "Cannot load hints config; keeping the config in force", "source", origin, "inForce", inForce)
}

// RecordSourceError records a load that failed before a document could be
// read (a missing file, a deleted ConfigMap key): counted and logged like a
// refused document, once per distinct message, and the config in force
// stays. Config sources call it.
func (d *Dispatcher) RecordSourceError(origin string, err error) {
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	d.recordFailure("source:"+err.Error(), origin, err)
}

// compileDoc parses and compiles a document, all or nothing: a config with
// any error is refused whole, as the sidecar must not run half a config.
// Warnings do not block it; they are returned for the log.
func compileDoc(cat *hints.Catalog, doc []byte, form hintsconfig.Form, modes hintsconfig.Modes) (*hintsconfig.Graph, hintsconfig.Problems, error) {
	cfg := &hintsconfig.Config{Form: form}
	if doc != nil {
		var err error
		if cfg, err = hintsconfig.ParseConfigForm(doc, form); err != nil {
			return nil, nil, err
		}
	}
	g, probs := hintsconfig.Compile(cat, cfg, modes)
	if probs.HasErrors() {
		return nil, nil, probs.Errors()
	}
	return g, probs.Warnings(), nil
}
