package configsource

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
	"github.com/kvrouter/kv-hint-operator/internal/compiled"
	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// ConfigMapSource loads the hints config from a ConfigMap through a watch
// limited to that one object (a field selector on its name), so the sidecar
// needs get/list/watch on ConfigMaps in its namespace and sees no other.
// It reloads within a watch round-trip of a change, without waiting for
// kubelet to refresh a mounted volume.
type ConfigMapSource struct {
	Client    kubernetes.Interface
	Namespace string
	// Name is the ConfigMap's name, <router>-hints.
	Name string
	// OnWorkerSelectors, when set, receives the roles' worker pools (from
	// the role settings, wellknown.RolesKey) with every load of the
	// config, as compiledLoader says: every role has one (poolsOf).
	OnWorkerSelectors func(map[string]labels.Selector)
	// Candidates, when set, takes the candidate of a staged rollout (the
	// ConfigMap's candidate keys and stage); nil ignores it.
	Candidates Candidates
	// OnCandidateWorkerSelectors, when set, receives the worker pools of
	// the candidate Candidates runs (poolsOf its role settings), and nil
	// when none runs, as compiledLoader says.
	OnCandidateWorkerSelectors func(map[string]labels.Selector)
	// OnStatus, when set, receives the config status after every load:
	// the stable config assigned and in force, and the candidate's.
	OnStatus func(rolloutapi.ConfigStatus)
}

// Run loads the ConfigMap into d on every change until ctx is done. A
// deleted ConfigMap or a missing key leaves the config in force.
func (s ConfigMapSource) Run(ctx context.Context, d *dispatch.Dispatcher, log logr.Logger) {
	origin := fmt.Sprintf("configmap %s/%s", s.Namespace, s.Name)
	log = log.WithValues("configmap", s.Namespace+"/"+s.Name)
	loader := compiledLoader{candidates: s.Candidates, onCandidatePools: s.OnCandidateWorkerSelectors, onStatus: s.OnStatus}
	apply := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		loader.load(d, cm.Data, origin, s.OnWorkerSelectors)
	}
	lw := cache.NewFilteredListWatchFromClient(s.Client.CoreV1().RESTClient(), "configmaps", s.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.Name).String()
		})
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: apiwatch.Patient(ctx, lw),
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    apply,
			UpdateFunc: func(_, obj any) { apply(obj) },
			DeleteFunc: func(any) {
				loader.sourceError(d, origin, fmt.Errorf("%w: the ConfigMap was deleted", dispatch.ErrConfigRejected))
			},
		},
	})
	log.Info("Watching hints ConfigMap")
	ctrl.RunWithContext(ctx)
}

// compiledLoader loads a compiled ConfigMap's data (from the API or a
// mounted directory): the policy file under each role's router mode, and
// the roles' worker pools with it. One loader serves one source, from one
// goroutine.
//
// A config and its pools are one unit: a malformed role settings key, or
// a refused policy file, keeps both as they were. The dispatcher's swap
// and the registry's are two steps, so between them the loader puts in
// force, for every role of either config, the stricter of its two pools
// (both selectors at once where both have one): no booking of the old
// config or the new one can reach a worker outside the role's pool of
// either, and a role new to the config is never without its pool.
//
// While a rollout runs, the data also holds a candidate and its stage
// (compiled.Split). The stable config loads as it would alone, first; the
// candidate then goes to candidates, in a dispatcher of its own: a
// candidate that does not decode or load is refused there (a NACK) and
// touches nothing of the stable path. The candidate's own worker pools go
// to onCandidatePools before it loads, so that its first canary booking
// is held to them, and are dropped when it is refused or leaves; for the
// moment between, a candidate replaced by another sees the newcomer's
// pools.
type compiledLoader struct {
	// pools are the pools of the config in force, as last applied.
	pools map[string]labels.Selector
	// candidates takes the rollout's candidate; nil ignores it.
	candidates Candidates
	// onCandidatePools receives the candidate's pools; nil ignores them.
	onCandidatePools func(map[string]labels.Selector)
	// candPoolsOf is the hash of the candidate whose pools were last
	// applied, "" when none are; candRefused that of the candidate last
	// refused.
	candPoolsOf, candRefused string
	// onStatus, when set, receives the config status after every load.
	onStatus func(rolloutapi.ConfigStatus)
	// assigned is the hash of the stable config last read; loadErr why
	// it is not in force ("" when it is).
	assigned, loadErr string
}

// Candidates takes a rollout's candidate config (package stage).
type Candidates interface {
	// Load stages cfg as the candidate in stage st; an error is a refusal
	// that Status reports.
	Load(cfg dispatch.Config, st rolloutapi.Stage, origin string) error
	// Refuse refuses the candidate st names, for err.
	Refuse(st rolloutapi.Stage, err error)
	// Clear drops the candidate: no rollout runs.
	Clear()
	// Status is what runs of the candidate; nil when none is staged.
	Status() *rolloutapi.CandidateStatus
}

func (l *compiledLoader) load(d *dispatch.Dispatcher, data map[string]string, origin string, onPools func(map[string]labels.Selector)) {
	staged, stageErr := compiled.Split(data)
	l.loadStable(d, staged.Stable, origin, onPools)
	if l.candidates != nil {
		switch {
		case stageErr != nil:
			l.candidates.Refuse(stageNamed(data), stageErr)
			l.dropCandidatePools()
		case staged.Stage == nil:
			l.candidates.Clear()
			l.dropCandidatePools()
		default:
			if dec, err := compiled.Decode(staged.Candidate); err != nil {
				l.candidates.Refuse(*staged.Stage, err)
				l.dropCandidatePools()
			} else {
				cfg := dispatch.Config{Doc: dec.Policy, Modes: dec.Modes(), Hash: dec.Hash, Form: dec.Form}
				hash := staged.Stage.Candidate
				if hash != l.candRefused {
					l.candidatePools(hash, poolsOf(dec))
				}
				if err := l.candidates.Load(cfg, *staged.Stage, origin+" (candidate)"); err != nil {
					// The status says why it is refused. Read again, the
					// same candidate is refused again (Stage.Load
					// remembers): its pools are not put in force again
					// only to be dropped.
					l.dropCandidatePools()
					l.candRefused = hash
				}
			}
		}
	}
	l.report(d)
}

// dropCandidatePools drops the candidate's pools: none runs, or it was
// refused.
func (l *compiledLoader) dropCandidatePools() {
	l.candidatePools("", nil)
	l.candRefused = ""
}

// candidatePools hands the pools of candidate hash to onCandidatePools,
// unless they are in force already: a source rereads the same candidate
// on every change of its stage, and each hand-over re-places every
// worker.
func (l *compiledLoader) candidatePools(hash string, pools map[string]labels.Selector) {
	if l.onCandidatePools == nil || hash == l.candPoolsOf {
		return
	}
	l.candPoolsOf = hash
	l.onCandidatePools(pools)
}

func (l *compiledLoader) loadStable(d *dispatch.Dispatcher, data map[string]string, origin string, onPools func(map[string]labels.Selector)) {
	l.assigned = compiled.Hash(data)
	dec, err := compiled.Decode(data)
	if err != nil {
		err = fmt.Errorf("%w: %w", dispatch.ErrConfigRejected, err)
		d.RecordSourceError(origin, err)
		l.loadErr = err.Error()
		return
	}
	cfg := dispatch.Config{Doc: dec.Policy, Modes: dec.Modes(), Hash: dec.Hash, Form: dec.Form}
	if onPools == nil {
		err = d.LoadConfig(cfg, origin) // logged and counted by LoadConfig
	} else {
		pools := poolsOf(dec)
		onPools(transitionPools(d.Roles(), l.pools, slices.Collect(maps.Keys(dec.Roles)), pools))
		if err = d.LoadConfig(cfg, origin); err != nil {
			onPools(l.pools) // the config in force stays, and so do its pools
		} else {
			onPools(pools)
			l.pools = pools
		}
	}
	l.loadErr = ""
	if err != nil {
		l.loadErr = err.Error()
	}
}

// sourceError records a failure to read the source: the config in force
// stays.
func (l *compiledLoader) sourceError(d *dispatch.Dispatcher, origin string, err error) {
	d.RecordSourceError(origin, err)
	l.loadErr = err.Error()
	l.report(d)
}

// report hands the config status to onStatus.
func (l *compiledLoader) report(d *dispatch.Dispatcher) {
	if l.onStatus == nil {
		return
	}
	active := d.ConfigHash()
	cs := rolloutapi.ConfigStatus{Assigned: l.assigned, Active: active, LastKnownGood: active, Error: l.loadErr}
	if l.candidates != nil {
		cs.Candidate = l.candidates.Status()
	}
	l.onStatus(cs)
}

// stageNamed is what a stage Split refused says, read leniently for the
// status: the candidate it names, else the hash of the candidate keys.
func stageNamed(data map[string]string) rolloutapi.Stage {
	var st rolloutapi.Stage
	if raw := data[compiled.StageKey]; len(raw) <= rolloutapi.MaxStageBytes {
		_ = json.Unmarshal([]byte(raw), &st) // best effort: the refusal's error says what is wrong
	}
	if !rolloutapi.ValidHash(st.Candidate) {
		cand := map[string]string{}
		for k, v := range data {
			if key, ok := strings.CutPrefix(k, compiled.CandidatePrefix); ok {
				cand[key] = v
			}
		}
		st.Candidate = compiled.Hash(cand)
	}
	return st
}

// poolsOf are the worker pools of a compiled config: one for every role,
// its workerSelector's, or labels.Everything for a role without one (it
// takes any registered worker, as the RouterRole's API says). Every role
// has an entry, so the registry can fail closed for a role it has none
// for.
func poolsOf(dec *compiled.Decoded) map[string]labels.Selector {
	out := make(map[string]labels.Selector, len(dec.Roles))
	for role := range dec.Roles {
		if sel, ok := dec.Selectors[role]; ok {
			out[role] = sel
		} else {
			out[role] = labels.Everything()
		}
	}
	return out
}

// transitionPools are the pools in force while the dispatcher swaps from a
// config with oldRoles and oldPools to one with newRoles and newPools: for
// each role of either, the pool of both where both have one (the
// selectors' requirements together), else the one there is. A role
// without a selector in both configs admits every worker, as it does in
// each.
func transitionPools(oldRoles []string, oldPools map[string]labels.Selector, newRoles []string, newPools map[string]labels.Selector) map[string]labels.Selector {
	out := map[string]labels.Selector{}
	for _, role := range append(slices.Clone(oldRoles), newRoles...) {
		a, inOld := oldPools[role]
		b, inNew := newPools[role]
		inOld = inOld && slices.Contains(oldRoles, role)
		inNew = inNew && slices.Contains(newRoles, role)
		switch {
		case inOld && inNew:
			out[role] = both(a, b)
		case inOld:
			out[role] = a
		case inNew:
			out[role] = b
		}
	}
	return out
}

// both selects what a and b both select.
func both(a, b labels.Selector) labels.Selector {
	ra, okA := a.Requirements()
	rb, okB := b.Requirements()
	if !okA || !okB {
		return labels.Nothing()
	}
	return labels.NewSelector().Add(ra...).Add(rb...)
}
