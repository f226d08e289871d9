package rolegraph

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// running is what a router's ConfigMap holds now.
type running struct {
	cfg     *compiled.Decoded
	sources map[string]compiled.Source
}

// selector returns the worker selector the router runs a role with.
func (r *running) selector(role string) *metav1.LabelSelector {
	if r == nil {
		return nil
	}
	return r.cfg.Roles[role].WorkerSelector
}

// readRunning reads a compiled ConfigMap back. It trusts the content only
// when it is intact: the hash annotation matches the data, and the config,
// the role settings and the sources all parse. Otherwise the router keeps
// no last good entries, and the reason is returned for the log.
func readRunning(cm *corev1.ConfigMap) (*running, error) {
	cfg, err := compiled.Decode(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	if got := cm.Annotations[v1alpha1.HashAnnotation]; got != cfg.Hash {
		return nil, fmt.Errorf("ConfigMap %s: %s is %q, but the content hashes to %q; it was changed by hand", cm.Name, v1alpha1.HashAnnotation, got, cfg.Hash)
	}
	sources, err := compiled.Sources(cm.Annotations)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	return &running{cfg: cfg, sources: sources}, nil
}

// lastGood returns the entry the router runs now for a RouterRole, checked
// again by the current catalog under the mode it runs with, and the
// generation it came from. It returns nil when the entry is not the
// RouterRole's (another object, or an earlier object of the same name) or
// no longer passes the rules. For a restart-mode router (wl not nil) the
// mode is the one its pod template starts it with now, whatever the
// entry was compiled under: a pod that starts with a file its mode
// refuses does not start, and one its build does not link either (t).
func (r *running) lastGood(cat *hints.Catalog, rr *v1alpha1.RouterRole, wl *Workload, t hintsconfig.Reader) (*hintsconfig.Role, int64) {
	if r == nil {
		return nil, 0
	}
	role := rr.Spec.Role
	src, ok := r.sources[role]
	if !ok || src.RouterRole != rr.Name || src.UID != rr.UID {
		return nil, 0
	}
	mode := r.cfg.Roles[role].RouterMode
	if wl != nil {
		mode = wl.Mode
	}
	// A file in the released form holds the router's hint policy at its
	// root: the entry runs it as the role's own.
	entry := r.cfg.Parsed.EntryUnder(role, mode)
	if entry == nil {
		return nil, 0
	}
	checked := hintsconfig.CheckRole(cat, hintsconfig.RoleInput{Reader: t, Name: role, Entry: entry, Modes: roleModes(role, mode, wl)})
	if checked.Role == nil {
		return nil, 0
	}
	return checked.Role, src.Generation
}
