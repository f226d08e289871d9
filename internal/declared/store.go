package declared

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelselection "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// CacheOptions returns the settings of the cache that holds the
// declared-catalog ConfigMaps, apart from the manager's cache, which holds
// only the ConfigMaps the manager writes: a label selector cannot say
// "either". namespaces, when not empty, limits it to those namespaces.
func CacheOptions(namespaces []string) cache.Options {
	hasCatalog, err := labels.NewRequirement(v1alpha1.CatalogForLabel, labelselection.Exists, nil)
	if err != nil {
		panic(fmt.Sprintf("declared: catalog label requirement: %v", err))
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.NewSelector().Add(*hasCatalog)},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// Limits bound what the manager spends on declared catalogs: each
// declaration within Budget (refused by counting, before it is compiled),
// and the memory the loaded ones are estimated to keep, per namespace and
// in all, so that no namespace, and no number of them, can grow the
// manager past its memory limit.
type Limits struct {
	// Budget bounds one declaration.
	Budget Budget
	// NamespaceBytes bounds the estimated memory of the distinct
	// declarations the ConfigMaps of one namespace hold; 0: no limit.
	NamespaceBytes int64
	// TotalBytes bounds the estimated memory of all loaded declarations;
	// 0: no limit.
	TotalBytes int64
	// FloorBytes and ReserveBytes keep the total from being taken by a
	// few namespaces: what namespaces keep above their first FloorBytes
	// each may take TotalBytes less ReserveBytes, so that ReserveBytes
	// stays for the first FloorBytes of the others (ReserveBytes /
	// FloorBytes namespaces, whatever the rest keep). 0: no reserve.
	FloorBytes   int64
	ReserveBytes int64
}

// DefaultLimits keep the manager's shipped limit (256Mi) well
// clear: at most 32 MiB of loaded declarations in all (estimated at about
// 1.2 times the heap they keep), 8 MiB of it (one declaration at its
// budget) for any one namespace, of which no more than 24 MiB above the
// first 512 KiB of each namespace: 8 MiB stay for sixteen namespaces'
// first 512 KiB, twice what config/catalogs/dynamo.yaml is estimated to
// keep (241 KiB).
// One load runs at a time.
func DefaultLimits() Limits {
	return Limits{Budget: DefaultBudget(), NamespaceBytes: 8 << 20, TotalBytes: 32 << 20,
		FloorBytes: 512 << 10, ReserveBytes: 8 << 20}
}

// Store resolves the catalog each router is checked against. A
// declaration is loaded once per content (its schemas checked and its CEL
// compiled then, not at every reconcile), shared by every ConfigMap that
// holds the same text and dropped when none does; loads run one at a
// time and outside the mutex, so that a router with no declaration, or
// one already loaded, never waits behind a load. It keeps the last good
// declaration of each router for when a newer one cannot be used.
type Store struct {
	reader client.Reader
	linked *hints.Catalog
	limits Limits
	// namespaces, when not empty, are the only ones whose declarations
	// are read (the catalog cache holds no others).
	namespaces []string
	// sem holds the one load that may run.
	sem chan struct{}
	// async, when set, makes ForRouter start a load it needs in the
	// background and return at once (RouterCatalog.Pending), so that no
	// router's reconcile holds one of the controller's workers while it
	// waits for the load slot or loads: a tenant's loads, queued in
	// front of another namespace's router, held all four and that router
	// waited for them (1.6 s after a restart, declarations at the
	// budget). base bounds the background loads, and loaded receives
	// the ConfigMaps whose load ended, for their routers' reconcile.
	async  bool
	base   context.Context
	loaded chan event.TypedGenericEvent[*corev1.ConfigMap]

	mu sync.Mutex
	// byHash holds each distinct declaration loaded or being loaded.
	byHash map[string]*loadEntry
	// byUID says which declaration each ConfigMap held when last read.
	byUID    map[types.UID]uidRef
	lastGood map[types.NamespacedName]lastGoodCatalog
	// refused holds, for each ConfigMap that waited on a background load
	// refused for what the others keep, that refusal, for its router's
	// next read only: the entry is gone, and a new load at once would
	// refuse, notify and load again without end.
	refused map[types.UID]error
}

// errLoadPending: the declaration is being loaded in the background; its
// router is reconciled again when the load ends.
var errLoadPending = errors.New("the declared catalog is being loaded")

// loadedEvents is how many ended loads may wait for the router
// controller to take them.
const loadedEvents = 1024

// lastGoodCatalog is a router's last usable declaration: its types, the
// policy-file form its build reads and the Dynamo version it runs.
type lastGoodCatalog struct {
	cat     *hints.Catalog
	form    hintsconfig.Form
	version string
}

// loadEntry is one distinct declaration. done is closed when the load
// ends; cat and err are set before.
type loadEntry struct {
	done chan struct{}
	cat  *Catalog
	err  error
	// retained is the estimate of what cat keeps (0 for an error).
	retained int64
	// refs are the ConfigMaps that hold it.
	refs map[types.UID]string // UID -> namespace
	// waiters are the ConfigMaps whose routers asked for it while it
	// loaded in the background, to be told when it is done.
	waiters map[types.UID]*corev1.ConfigMap
	// cancel ends the load's wait for the load slot, when nothing holds
	// it any more (its ConfigMap was edited or deleted meanwhile).
	cancel context.CancelFunc
}

type uidRef struct{ hash string }

// NewStore returns a store that reads declared-catalog ConfigMaps with
// reader (a cache built with CacheOptions), resolves routers that declare
// none to linked and keeps within limits. namespaces, when not empty, are
// the only ones whose declarations are read.
func NewStore(reader client.Reader, linked *hints.Catalog, limits Limits, namespaces ...string) *Store {
	return &Store{
		namespaces: namespaces,
		reader:     reader,
		linked:     linked,
		limits:     limits,
		sem:        make(chan struct{}, 1),
		byHash:     map[string]*loadEntry{},
		byUID:      map[types.UID]uidRef{},
		lastGood:   map[types.NamespacedName]lastGoodCatalog{},
		refused:    map[types.UID]error{},
	}
}

// LoadInBackground makes ForRouter load in the background, within base,
// and returns the channel of the ConfigMaps whose load ended.
func (c *Store) LoadInBackground(base context.Context) <-chan event.TypedGenericEvent[*corev1.ConfigMap] {
	c.async, c.base = true, base
	c.loaded = make(chan event.TypedGenericEvent[*corev1.ConfigMap], loadedEvents)
	return c.loaded
}

// RouterCatalog is the catalog a router's roles are compiled against.
type RouterCatalog struct {
	Catalog *hints.Catalog
	// Form is the policy-file form the router's build reads: its
	// declaration's, or empty when none says, and the router's target
	// decides (rolegraph.RouterForm).
	Form hintsconfig.Form
	// Version is the Dynamo version its declaration states, empty when
	// none does (rolegraph.DialectOf).
	Version string
	// Source names the declaration for logs, empty for the linked catalog.
	Source string
	// Problem, when set, says why the router's declaration cannot be used;
	// Catalog is then the last good declaration, or the linked catalog.
	Problem *rolegraph.Finding
	// Pending is set, and nothing else, while the router's declaration
	// loads in the background: the router is reconciled again when the
	// load ends.
	Pending bool
}

// ForRouter returns the catalog of one router.
func (c *Store) ForRouter(ctx context.Context, namespace, router string) (RouterCatalog, error) {
	cms, err := c.declarations(ctx, namespace, client.MatchingLabels{v1alpha1.CatalogForLabel: router})
	if err != nil {
		return RouterCatalog{}, err
	}
	key := types.NamespacedName{Namespace: namespace, Name: router}
	if len(cms) == 0 {
		c.mu.Lock()
		delete(c.lastGood, key)
		c.dropLocked(lastGoodUID(key))
		c.mu.Unlock()
		return RouterCatalog{Catalog: c.linked}, nil
	}
	pending := false
	decl, problem := rolegraph.RouterCatalog(router, cms, func(cm *corev1.ConfigMap) (rolegraph.Declaration, error) {
		d, err := c.load(ctx, cm, !c.async)
		if errors.Is(err, errLoadPending) {
			pending = true
		}
		if err != nil {
			return rolegraph.Declaration{}, err
		}
		return rolegraph.Declaration{Catalog: d.Catalog, Form: d.Form, DynamoVersion: d.DynamoVersion}, nil
	})
	if err := ctx.Err(); err != nil {
		return RouterCatalog{}, err
	}
	if pending {
		return RouterCatalog{Pending: true}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if problem != nil {
		rc := RouterCatalog{Catalog: c.linked, Problem: problem}
		if good, ok := c.lastGood[key]; ok {
			rc.Catalog, rc.Form, rc.Version = good.cat, good.form, good.version
		}
		return rc, nil
	}
	c.lastGood[key] = lastGoodCatalog{cat: decl.Catalog, form: decl.Form, version: decl.DynamoVersion}
	// The last good declaration is kept while a newer one cannot be
	// used, so it counts while it is kept.
	c.referLocked(lastGoodUID(key), namespace, textHash(cms[0].Data[v1alpha1.CatalogKey]))
	return RouterCatalog{Catalog: decl.Catalog, Form: decl.Form, Version: decl.DynamoVersion, Source: cms[0].Name}, nil
}

// declarations lists the declared-catalog ConfigMaps that match.
func (c *Store) declarations(ctx context.Context, namespace string, match client.MatchingLabels) ([]corev1.ConfigMap, error) {
	if len(c.namespaces) > 0 && !slices.Contains(c.namespaces, namespace) {
		// Declarations are not read here: the linked catalog applies.
		return nil, nil
	}
	var list corev1.ConfigMapList
	if err := c.reader.List(ctx, &list, client.InNamespace(namespace), match); err != nil {
		return nil, fmt.Errorf("listing the declared catalogs of namespace %s: %w", namespace, err)
	}
	return list.Items, nil
}

// load returns the declaration a ConfigMap holds: the one already loaded
// from the same text, by this ConfigMap or another, or a new load, which
// waits for the one load that may run. Without wait, a load that has not
// ended is left to run in the background (started if need be) and
// errLoadPending returned; the ConfigMap is sent on c.loaded when it ends.
// Callers do not hold c.mu.
func (c *Store) load(ctx context.Context, cm *corev1.ConfigMap, wait bool) (*Catalog, error) {
	text, ok := cm.Data[v1alpha1.CatalogKey]
	if !ok {
		// LoadConfigMap words the missing key; nothing to keep.
		return LoadConfigMap(cm)
	}
	hash := textHash(text)

	c.mu.Lock()
	c.refer(cm, hash)
	e, ok := c.byHash[hash]
	if !ok && !wait {
		if err, refused := c.refused[cm.UID]; refused {
			delete(c.refused, cm.UID)
			c.mu.Unlock()
			return nil, err
		}
	}
	var lctx context.Context
	if !ok {
		e = &loadEntry{done: make(chan struct{}), refs: map[types.UID]string{cm.UID: cm.Namespace}}
		base := ctx
		if !wait {
			base = c.base
		}
		lctx, e.cancel = context.WithCancel(base)
		c.byHash[hash] = e
	}
	if !wait {
		select {
		case <-e.done:
		default:
			if e.waiters == nil {
				e.waiters = map[types.UID]*corev1.ConfigMap{}
			}
			e.waiters[cm.UID] = cm
			c.mu.Unlock()
			if !ok {
				go c.run(lctx, e, hash, text, cm.Namespace, cm.Labels[v1alpha1.CatalogForLabel])
			}
			return nil, errLoadPending
		}
	}
	c.mu.Unlock()

	if ok {
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err == nil {
			// Shared with another namespace, it counts against this one too.
			if err := c.admitShared(cm.Namespace, hash, e.retained); err != nil {
				return nil, err
			}
		}
		if e.err != nil && ctx.Err() == nil && passing(e.err) {
			// The load this one waited for ended for its own caller's
			// reason (its context, its namespace's budget): load again.
			return c.load(ctx, cm, wait)
		}
		return e.cat, e.err
	}
	return c.run(lctx, e, hash, text, cm.Namespace, cm.Labels[v1alpha1.CatalogForLabel])
}

// run loads a new entry's text when the one load slot is free, within
// ctx (the entry's own, which releaseLocked cancels), ends the entry and
// tells its waiters. An entry released meanwhile is not loaded, or, when
// its load had begun, not kept.
func (c *Store) run(ctx context.Context, e *loadEntry, hash, text, namespace, router string) (*Catalog, error) {
	defer e.cancel()
	select {
	case c.sem <- struct{}{}:
		if ctx.Err() != nil {
			<-c.sem
			return c.cancelled(ctx, e, hash)
		}
	case <-ctx.Done():
		return c.cancelled(ctx, e, hash)
	}
	var retained int64
	budget := c.limits.Budget.WithAdmission(func(u Usage) error {
		retained = u.RetainedBytes
		return c.admit(namespace, router, u.RetainedBytes)
	})
	cat, err := budget.Load([]byte(text))
	<-c.sem

	c.mu.Lock()
	e.cat, e.err = cat, err
	current := c.byHash[hash] == e
	if err == nil && current {
		e.retained = retained
	}
	if !current {
		// Released while it loaded: nothing holds it, and nothing keeps it.
		e.cat = nil
		if err == nil {
			e.err = context.Canceled
		}
	}
	if _, refused := errors.AsType[*admissionError](err); refused && current {
		// Refused for what the others keep, not for itself: read again
		// next time, when they may be gone.
		delete(c.byHash, hash)
		for uid := range e.refs {
			delete(c.byUID, uid)
		}
		for uid := range e.waiters {
			c.refused[uid] = err
		}
	}
	waiters := e.waiters
	e.waiters = nil
	// Closed under c.mu, so that a reader that found it open has
	// registered as a waiter before waiters was taken.
	close(e.done)
	c.mu.Unlock()
	for _, cm := range waiters {
		select {
		case c.loaded <- event.TypedGenericEvent[*corev1.ConfigMap]{Object: cm}:
		case <-ctx.Done():
			return cat, err
		}
	}
	return cat, err
}

// cancelled ends an entry whose load did not run: its context ended,
// because its caller gave up or nothing holds it any more.
func (c *Store) cancelled(ctx context.Context, e *loadEntry, hash string) (*Catalog, error) {
	c.mu.Lock()
	if c.byHash[hash] == e {
		delete(c.byHash, hash)
	}
	e.err = ctx.Err()
	waiters := e.waiters
	e.waiters = nil
	close(e.done)
	c.mu.Unlock()
	// A router that joined this load reads again, and starts its own.
	for _, cm := range waiters {
		select {
		case c.loaded <- event.TypedGenericEvent[*corev1.ConfigMap]{Object: cm}:
		default:
		}
	}
	return nil, ctx.Err()
}

// passing reports whether a load's error belongs to the caller that ran
// it, not to the declaration: a waiter for the same text loads again.
func passing(err error) bool {
	_, refused := errors.AsType[*admissionError](err)
	return refused || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// admissionError is a declaration within its own budget that the
// manager's budget for all of them cannot take now.
type admissionError struct{ msg string }

func (e *admissionError) Error() string { return e.msg }

// admit checks that a new declaration of namespace fits the namespace's
// and the manager's budgets, before it is compiled.
func (c *Store) admit(namespace, router string, retained int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The router's last good declaration, when nothing else holds it,
	// goes once this one loads: it does not count against it.
	replaced := ""
	if ref, ok := c.byUID[lastGoodUID(types.NamespacedName{Namespace: namespace, Name: router})]; ok {
		if e, ok := c.byHash[ref.hash]; ok && len(e.refs) == 1 {
			replaced = ref.hash
		}
	}
	ns, total := c.usedLocked(namespace, replaced)
	if err := c.checkLocked(namespace, ns, total, retained); err != nil {
		return err
	}
	return c.checkSharedLocked(namespace, replaced, retained)
}

// checkSharedLocked checks that what namespaces keep above their floor
// stays out of the reserve with a new declaration of namespace.
func (c *Store) checkSharedLocked(namespace, except string, retained int64) error {
	lim := c.limits
	if lim.ReserveBytes <= 0 || lim.TotalBytes <= 0 {
		return nil
	}
	byNS := map[string]int64{}
	for h, e := range c.byHash {
		if h == except {
			continue
		}
		seen := map[string]bool{}
		for _, n := range e.refs {
			if !seen[n] {
				seen[n] = true
				byNS[n] += e.retained
			}
		}
	}
	above := func(n int64) int64 { return max(0, n-lim.FloorBytes) }
	var shared int64
	for _, n := range byNS {
		shared += above(n)
	}
	shared += above(byNS[namespace]+retained) - above(byNS[namespace])
	if room := max(0, lim.TotalBytes-lim.ReserveBytes); shared > room {
		return &admissionError{msg: fmt.Sprintf(
			"namespaces would keep about %s of declared catalogs above their first %s each with this one (%s), over the %s the manager shares: its budget of %s less the %s it keeps for the first %s of every namespace (manager flags --catalog-max-memory-total, --catalog-memory-reserve, --catalog-memory-floor-per-namespace)",
			Bytes(shared), Bytes(lim.FloorBytes), Bytes(retained), Bytes(room),
			Bytes(lim.TotalBytes), Bytes(lim.ReserveBytes), Bytes(lim.FloorBytes))}
	}
	return nil
}

// admitShared checks that a declaration already loaded for another
// namespace fits namespace's budget.
func (c *Store) admitShared(namespace, hash string, retained int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, _ := c.usedLocked(namespace, hash)
	if lim := c.limits.NamespaceBytes; lim > 0 && ns+retained > lim {
		return &admissionError{msg: fmt.Sprintf(
			"the declared catalogs of namespace %s would keep about %s with this one (%s), over the budget of %s per namespace (manager flag --catalog-max-memory-per-namespace)",
			namespace, Bytes(ns+retained), Bytes(retained), Bytes(lim))}
	}
	return nil
}

func (c *Store) checkLocked(namespace string, ns, total, retained int64) error {
	if lim := c.limits.NamespaceBytes; lim > 0 && ns+retained > lim {
		return &admissionError{msg: fmt.Sprintf(
			"the declared catalogs of namespace %s would keep about %s with this one (%s), over the budget of %s per namespace (manager flag --catalog-max-memory-per-namespace)",
			namespace, Bytes(ns+retained), Bytes(retained), Bytes(lim))}
	}
	if lim := c.limits.TotalBytes; lim > 0 && total+retained > lim {
		return &admissionError{msg: fmt.Sprintf(
			"the manager's declared catalogs would keep about %s with this one (%s), over its budget of %s in all (manager flag --catalog-max-memory-total)",
			Bytes(total+retained), Bytes(retained), Bytes(lim))}
	}
	return nil
}

// usedLocked sums the estimates of the loaded declarations, those held
// by a ConfigMap of namespace and all, leaving out except. Loads under
// way count at what their admission reserved.
func (c *Store) usedLocked(namespace, except string) (ns, total int64) {
	for h, e := range c.byHash {
		if h == except {
			continue
		}
		total += e.retained
		for _, n := range e.refs {
			if n == namespace {
				ns += e.retained
				break
			}
		}
	}
	return ns, total
}

// refer records that a ConfigMap holds the declaration hash, releasing
// what it held before when that differs. Callers hold c.mu.
func (c *Store) refer(cm *corev1.ConfigMap, hash string) {
	c.referLocked(cm.UID, cm.Namespace, hash)
}

// referLocked records that uid, of namespace, holds the declaration
// hash, releasing what it held before when that differs.
func (c *Store) referLocked(uid types.UID, namespace, hash string) {
	if old, ok := c.byUID[uid]; ok && old.hash != hash {
		c.releaseLocked(uid, old.hash)
	}
	c.byUID[uid] = uidRef{hash: hash}
	if e, ok := c.byHash[hash]; ok {
		e.refs[uid] = namespace
	}
}

// lastGoodUID is the reference a router's last good declaration holds
// on its entry; no ConfigMap has such a UID.
func lastGoodUID(router types.NamespacedName) types.UID {
	return types.UID("last-good:" + router.String())
}

// textHash names a declaration's text.
func textHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// releaseLocked drops a ConfigMap's reference to a declaration, and the
// declaration when nothing holds it any more.
func (c *Store) releaseLocked(uid types.UID, hash string) {
	e, ok := c.byHash[hash]
	if !ok {
		return
	}
	delete(e.refs, uid)
	if len(e.refs) == 0 {
		// Dropped at once, done or not, so that its estimate stops
		// counting; a load that waits for the slot is cancelled, and
		// one under way ends unkept (run).
		delete(c.byHash, hash)
		e.cancel()
	}
}

// Forget drops a ConfigMap that is gone, and what was loaded from it when
// no other ConfigMap holds the same text.
func (c *Store) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(uid)
	delete(c.refused, uid)
}

// dropLocked drops what uid holds.
func (c *Store) dropLocked(uid types.UID) {
	if ref, ok := c.byUID[uid]; ok {
		c.releaseLocked(uid, ref.hash)
		delete(c.byUID, uid)
	}
}

// Loaded returns how many distinct declarations are kept, and their
// estimated memory, for tests and metrics.
func (c *Store) Loaded() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, total := c.usedLocked("", "")
	return len(c.byHash), total
}

// ForType returns the usable declarations of a namespace that declare a
// hint policy type, by router name, for a HintPolicy whose type the linked
// catalog does not hold.
func (c *Store) ForType(ctx context.Context, namespace, hintType string) (map[string]*hints.Catalog, error) {
	cms, err := c.declarations(ctx, namespace, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]*hints.Catalog{}
	for i := range cms {
		cat, err := c.load(ctx, &cms[i], true)
		if err != nil {
			continue
		}
		if _, ok := cat.Catalog.Hint(hintType); ok {
			out[cms[i].Labels[v1alpha1.CatalogForLabel]] = cat.Catalog
		}
	}
	return out, nil
}
