package rolegraph

import (
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// SourcesAnnotation on a compiled ConfigMap records, per role, the
// RouterRole and generation its entry was compiled from, as JSON. With it
// the manager keeps a role's last accepted entry across an invalid change
// and a restart, without any state of its own. It is the manager's
// business; routers ignore it.
const SourcesAnnotation = "hints.kvrouter.io/sources"

// Source is where one role's entry in a compiled config came from.
type Source struct {
	// RouterRole is the name of the RouterRole.
	RouterRole string `json:"routerRole"`
	// UID tells a RouterRole from an earlier one of the same name: a
	// recreated object does not inherit the entry of the one deleted.
	UID types.UID `json:"uid,omitempty"`
	// Generation is the RouterRole generation the entry was compiled from.
	Generation int64 `json:"generation"`
}

// running is what a router's ConfigMap holds now.
type running struct {
	cfg     *hintsconfig.Config
	sources map[string]Source
	// selectors are the roles' worker selectors the router runs with
	// (v1alpha1.WorkerSelectorsKey); nil when the key is absent or does
	// not parse.
	selectors map[string]*metav1.LabelSelector
}

// selector returns the worker selector the router runs a role with.
func (r *running) selector(role string) *metav1.LabelSelector {
	if r == nil {
		return nil
	}
	return r.selectors[role]
}

// readRunning reads a compiled ConfigMap back. It trusts the content only
// when it is intact: the hash annotation matches the data and both the
// config and the sources parse. Otherwise the router keeps no last good
// entries, and the reason is returned for the log.
func readRunning(cm *corev1.ConfigMap) (*running, error) {
	doc, ok := cm.Data[v1alpha1.HintsConfigKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s has no %s key", cm.Name, v1alpha1.HintsConfigKey)
	}
	if got, want := cm.Annotations[v1alpha1.HashAnnotation], hintsconfig.ContentHash([]byte(doc)); got != want {
		return nil, fmt.Errorf("ConfigMap %s: %s is %q, but the content hashes to %q; it was changed by hand", cm.Name, v1alpha1.HashAnnotation, got, want)
	}
	var sources map[string]Source
	if err := json.Unmarshal([]byte(cm.Annotations[SourcesAnnotation]), &sources); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: annotation %s: %w", cm.Name, SourcesAnnotation, err)
	}
	cfg, err := hintsconfig.ParseConfig([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	run := &running{cfg: cfg, sources: sources}
	if raw, ok := cm.Data[v1alpha1.WorkerSelectorsKey]; ok {
		// Best effort: without it a role keeps its hints but not its pool.
		_ = yaml.UnmarshalStrict([]byte(raw), &run.selectors)
	}
	return run, nil
}

// lastGood returns the entry the router runs now for a RouterRole, checked
// again by the current catalog, and the generation it came from. It
// returns nil when the entry is not the RouterRole's (another object, or
// an earlier object of the same name) or no longer passes the rules.
func (r *running) lastGood(cat *hints.Catalog, rr *v1alpha1.RouterRole) (*hintsconfig.Role, int64) {
	if r == nil {
		return nil, 0
	}
	role := rr.Spec.Role
	src, ok := r.sources[role]
	if !ok || src.RouterRole != rr.Name || src.UID != rr.UID {
		return nil, 0
	}
	entry, ok := r.cfg.WorkerSelection[role]
	if !ok {
		return nil, 0
	}
	mode := r.cfg.RouterMode
	if mode == "" {
		mode = hintsconfig.ModeKV
	}
	compiled, probs := hintsconfig.CompileRole(cat, role, entry, mode)
	if probs.HasErrors() {
		return nil, 0
	}
	return compiled, src.Generation
}
