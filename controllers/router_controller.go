package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/configmaps"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
	"github.com/kvrouter/kv-hint-operator/internal/routerinput"
	"github.com/kvrouter/kv-hint-operator/internal/watches"
	"github.com/kvrouter/kv-hint-operator/internal/workload"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// RouterReconciler compiles the RouterRoles of one router into the
// router's ConfigMap and writes their status. Its requests name a router:
// Namespace is the namespace, Name the router (see the package doc).
type RouterReconciler struct {
	Client client.Client
	// APIReader reads around the cache (routerinput.Reader).
	APIReader client.Reader
	// Catalog is the linked catalog, for routers that declare none.
	Catalog  *hints.Catalog
	Recorder events.EventRecorder

	// catalogs resolves each router's catalog: a declared one (see
	// v1alpha1.CatalogForLabel) or Catalog. Nil: every router runs Catalog.
	catalogs *declared.Store
	// catalogCache holds the declared-catalog ConfigMaps, watched apart
	// from the manager's cache.
	catalogCache cache.Cache
	// graphs watches DynamoGraphDeployments once their CRD is served;
	// nil: never.
	graphs *workload.GraphWatch
	// rollout writes restart-mode routers' workloads (Deployments and
	// DynamoGraphDeployments alike).
	rollout *workload.Rollout
	// configMaps writes the router's compiled ConfigMap and a staged
	// rollout's candidates.
	configMaps *configmaps.Writer
	// loaded tells of the declared-catalog ConfigMaps whose background
	// load ended (declared.Store.LoadInBackground).
	loaded <-chan event.TypedGenericEvent[*corev1.ConfigMap]
	// waiting holds, by router, when the roles' status began to wait for
	// the pods to report a new config (see awaitReports).
	waiting sync.Map // types.NamespacedName -> time.Time
	// refused holds, by router, its last refused write of a config to a
	// workload (see workload.Refused), until a rollout goes through.
	refused sync.Map // types.NamespacedName -> rolegraph.WriteRefusal
}

// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=routerroles,verbs=get;list;watch
// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=routerroles/status,verbs=get;patch
// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=hintpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=hints.kvrouter.io,resources=routerrollouts,verbs=get;list;watch
// ConfigMaps: get reads a compiled ConfigMap whose labels were edited away
// (routerinput.Reader), list and watch fill the label-selected cache, create and
// patch are server-side apply, delete removes the ConfigMap of a router
// that has no RouterRoles left (a RouterRole may move to another router,
// and then no garbage collector would). RBAC cannot restrict any of this
// to the "<router>-hints" names: the manager itself refuses to write or
// delete a ConfigMap it did not create (rolegraph.CreatedByManager). Pods:
// list and watch fill the cache of router pods; nothing else.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile recompiles one router: it reads the router's RouterRoles, the
// HintPolicies they reference, the ConfigMap, the router pods and
// workloads, compiles them, writes the ConfigMap if it changed, rolls the
// opted-in workloads to the config (workload.Rollout), and then, at its
// one exit, writes the status of every role whose status changed: once
// per reconcile, or not at all while it waits for the router pods'
// reports (awaitReports).
func (r *RouterReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	o, err := r.run(ctx, req)
	if err != nil || o.out == nil {
		return o.result, err
	}
	if o.wait > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Waiting for the router pods' reports before writing status",
			"pods", o.compiled.Pods, "upToDate", o.compiled.PodsUpToDate, "for", o.wait)
		return ctrl.Result{RequeueAfter: o.wait}, nil
	}
	res, err := retryStale(ctx, r.writeStatus(ctx, o.roles, o.out))
	if err == nil && o.after > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > o.after) {
		res.RequeueAfter = o.after
	}
	return recheck(res, o.recheck, o.now), err
}

// outcome is what one reconcile of a router computed and did: the status
// its one exit writes, and when the router is looked at again.
type outcome struct {
	// out is the compiled status of roles; nil: no status to write, and
	// result is the reconcile's.
	roles    []v1alpha1.RouterRole
	out      *rolegraph.Output
	compiled *rolegraph.Router
	result   ctrl.Result
	// after, when set, brings the router back at the latest that long
	// after the status write, which no event would.
	after time.Duration
	// wait, when set, leaves the status unwritten for now (awaitReports).
	wait time.Duration
	// recheck are the workloads whose progress deadline brings the
	// router back (Workload.RecheckAt), seen at now.
	recheck []*rolegraph.Workload
	now     time.Time
}

// run computes the router's compiled config and status and runs the side
// effects (the ConfigMap, the rollout); Reconcile writes the status.
func (r *RouterReconciler) run(ctx context.Context, req reconcile.Request) (outcome, error) {
	in, current, err := routerinput.Reader{Client: r.Client, APIReader: r.APIReader}.Read(ctx, req.Namespace, req.Name)
	if err != nil {
		return outcome{}, err
	}
	if len(in.RouterRoles) == 0 {
		r.waiting.Delete(req.NamespacedName)
		r.refused.Delete(req.NamespacedName)
		return outcome{}, r.configMaps.Delete(ctx, current)
	}
	rc, err := r.routerCatalog(ctx, req.Namespace, req.Name)
	if err != nil {
		return outcome{}, err
	}
	if rc.Pending {
		// Reconciled again when the load ends (watches.CatalogEvents); the
		// requeue is only a safety net.
		ctrl.LoggerFrom(ctx).V(1).Info("Waiting for the router's declared catalog to load")
		return outcome{result: ctrl.Result{RequeueAfter: pendingRetry}}, nil
	}
	if rc.Problem != nil {
		in.CatalogProblems = map[string]rolegraph.Finding{req.Name: *rc.Problem}
	}
	in.PolicyFileForms = map[string]hintsconfig.Form{req.Name: rc.Form}
	in.DeclaredCatalogs = map[string]bool{req.Name: rc.Source != ""}
	in.DynamoVersions = map[string]string{req.Name: rc.Version}
	ro, err := r.rollout.List(ctx, req.Namespace, req.Name, &in)
	if err != nil {
		return outcome{}, err
	}

	// A router a RouterRollout stages runs its stable config until a
	// candidate is promoted: its unchanged roles are counted against it.
	if staging, _, err := routerRollout(ctx, r.Client, req.Namespace, req.Name); err != nil {
		return outcome{}, err
	} else if staging != nil {
		in.Staged = map[string]bool{req.Name: true}
	}
	in.Now = metav1.Now()
	in.WriteRefusals = r.refusals(req.NamespacedName)
	out := rolegraph.Compile(rc.Catalog, in)
	compiled := out.Router(req.Name)
	if compiled == nil {
		// Every RouterRole found through the router index names this
		// router, and the schema makes it a DNS label: unreachable unless
		// the CRD's validation was bypassed.
		return outcome{}, fmt.Errorf("router %q: no compiled config for its RouterRoles", req.Name)
	}
	o := outcome{roles: in.RouterRoles, out: out, compiled: compiled}
	for _, note := range compiled.Notes {
		ctrl.LoggerFrom(ctx).Info("Existing ConfigMap not used for last good entries", "configMap", v1alpha1.HintsConfigMapName(req.Name), "note", note)
	}
	if compiled.Conflict != "" {
		ctrl.LoggerFrom(ctx).Info("Not writing hints config: a ConfigMap of that name is not ours", "configMap", v1alpha1.HintsConfigMapName(req.Name))
		// The cache holds only ConfigMaps the manager wrote, so no
		// event tells when the other one goes: look again later.
		o.after = conflictRetry
		return o, nil
	}
	if compiled.Held != "" {
		ctrl.LoggerFrom(ctx).Info("Not writing hints config: the router's declared catalog cannot be used", "configMap", v1alpha1.HintsConfigMapName(req.Name), "problem", compiled.Held)
		return o, nil
	}
	staged, rollout, err := r.stage(ctx, req.Namespace, current, compiled)
	if err != nil {
		return outcome{}, err
	}
	compiled.ConfigMap = staged.ConfigMap
	markRoles(o.out, in.RouterRoles, rollout, staged, in.Now)
	wrote, err := r.configMaps.Apply(ctx, current, compiled)
	if err != nil {
		return outcome{}, err
	}
	if rollout != nil {
		if err := r.configMaps.Candidate(ctx, rollout, staged.Candidate); err != nil {
			return outcome{}, err
		}
	}
	heldBy, held, err := r.holdForRollout(ctx, req.Namespace, compiled, in.Deployments)
	if err != nil {
		return outcome{}, err
	}
	rollErr := r.rollout.Roll(ctx, &in, ro, compiled)
	recompile, refusal := r.noteRollout(ctx, req.NamespacedName, rollErr)
	if rollErr != nil && refusal == nil {
		return outcome{}, rollErr
	}
	if recompile {
		// The status compiled before the rollout says what it did
		// not know: that the write was refused, or that it no longer is.
		in.WriteRefusals = r.refusals(req.NamespacedName)
		o.out = rolegraph.Compile(rc.Catalog, in)
		o.compiled = o.out.Router(req.Name)
	}
	if err := r.markHeld(ctx, o.out, in.RouterRoles, heldBy, held, compiled, in.Now); err != nil {
		return outcome{}, err
	}
	if refusal != nil {
		o.after = refusedRetry
		return o, nil
	}
	o.wait = r.awaitReports(req.NamespacedName, wrote, o.compiled, in.Now.Time)
	o.recheck, o.now = o.compiled.Workloads, in.Now.Time
	return o, nil
}

// recheck makes res come back when a workload's progress deadline ends
// (Workload.RecheckAt), which no event marks.
func recheck(res ctrl.Result, workloads []*rolegraph.Workload, now time.Time) ctrl.Result {
	for _, w := range workloads {
		if w.RecheckAt.IsZero() {
			continue
		}
		after := max(w.RecheckAt.Sub(now), time.Second)
		if res.RequeueAfter == 0 || after < res.RequeueAfter {
			res.RequeueAfter = after
		}
	}
	return res
}

// routerCatalog returns the catalog the router's roles are compiled
// against: its declared one, when a ConfigMap declares it, or the linked
// one.
func (r *RouterReconciler) routerCatalog(ctx context.Context, namespace, router string) (declared.RouterCatalog, error) {
	if r.catalogs == nil {
		return declared.RouterCatalog{Catalog: r.Catalog}, nil
	}
	return r.catalogs.ForRouter(ctx, namespace, router)
}

// pendingRetry is when a router whose declared catalog was loading is
// looked at again if the end of the load was not heard of.
const pendingRetry = time.Minute

// awaitReports returns how much longer the roles' status waits for the
// router pods to report its config, or 0 to write it now.
//
// A sidecar router's pods apply a new config as soon as they see it and
// report it on their pods, which reconciles the router at once. So once a
// reconcile has written a new config, the status is left unwritten until
// every pod reports it or reportWait has passed, whichever is first, and is
// then written once, with Programmed as the pods report it, instead of as
// Pending at once (by the write's reconcile, or the one its own ConfigMap
// event brings) and again a moment later. At a thousand roles that was a
// quarter of the manager's API requests. The wait starts at the first
// write and is not extended by later ones, so a config that keeps changing
// still gets a status at least every reportWait. Restart-mode routers roll
// their pods, which takes seconds to minutes: their status is written as
// the rollout goes.
func (r *RouterReconciler) awaitReports(router types.NamespacedName, wrote bool, compiled *rolegraph.Router, now time.Time) time.Duration {
	if len(compiled.Workloads) > 0 || compiled.Pods == 0 || compiled.PodsUpToDate == compiled.Pods {
		r.waiting.Delete(router)
		return 0
	}
	since, ok := r.waiting.Load(router)
	if !ok {
		if !wrote {
			return 0
		}
		r.waiting.Store(router, now)
		return reportWait
	}
	if left := reportWait - now.Sub(since.(time.Time)); left > 0 {
		return left
	}
	r.waiting.Delete(router)
	return 0
}

// reportWait is how long a reconcile that wrote a sidecar router's new
// config leaves the roles' status unwritten, waiting for the sidecars to
// report it (they take milliseconds): how much later than its config a
// role's status may be written.
const reportWait = 500 * time.Millisecond

// conflictRetry is how often a router blocked by a ConfigMap that is not
// the manager's is looked at again.
const conflictRetry = 30 * time.Second

// SetupWithManager registers the reconciler and its watches. Every watch
// maps its object to the router it concerns.
func (r *RouterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.catalogCache == nil {
		return fmt.Errorf("router controller: no declared-catalog cache (use Setup)")
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named("router").
		Watches(&v1alpha1.RouterRole{},
			handler.EnqueueRequestsFromMapFunc(watches.RouterOfRole),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, watches.DynamoVersionChanged))).
		// A rollout's status says what the ConfigMap stages.
		Watches(&v1alpha1.RouterRollout{},
			handler.EnqueueRequestsFromMapFunc(watches.RouterOfRollout),
			builder.WithPredicates(watches.StagingChanged)).
		Watches(&v1alpha1.HintPolicy{},
			handler.EnqueueRequestsFromMapFunc(watches.RoutersUsingPolicy(mgr.GetClient(), indexPolicyRef)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The cache holds only compiled ConfigMaps (see managercache.Options): any
		// change to one is drift to repair, or the echo of our own write,
		// which compiles to no write.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(watches.RouterOfLabel)).
		Watches(&corev1.Pod{},
			watches.ProgressEvents(watches.PodReportChanged),
			builder.WithPredicates(watches.RouterPodChanged)).
		WatchesRawSource(source.Kind(r.catalogCache, &corev1.ConfigMap{}, watches.CatalogEvents(r.catalogs))).
		WatchesRawSource(source.Channel(r.loaded, watches.CatalogEvents(nil))).
		// Restart-mode routers: a Deployment's rollout status and template
		// are what Programmed reports and what drift is; its ReplicaSets
		// keep config revisions from garbage collection.
		Watches(&appsv1.Deployment{}, watches.ProgressEvents(watches.WorkloadChanged)).
		Watches(&appsv1.ReplicaSet{},
			handler.EnqueueRequestsFromMapFunc(watches.RouterOfLabel),
			builder.WithPredicates(watches.ReplicaSetCameOrWent)).
		WithLogConstructor(func(req *reconcile.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "router")
			if req != nil {
				l = l.WithValues("namespace", req.Namespace, "router", req.Name)
			}
			return l
		}).
		Build(r)
	if err != nil || r.graphs == nil {
		return err
	}
	r.graphs.Watch = func(gc cache.Cache, obj client.Object) error {
		return c.Watch(source.Kind(gc, obj, watches.ProgressEvents(watches.GraphChanged)))
	}
	return mgr.Add(r.graphs)
}

// refusedRetry is how often a refused write (workload.Refused) is tried again when nothing
// of the router changes (an admission policy may be removed, which no
// watch of the manager's sees).
const refusedRetry = 15 * time.Second

// refusals returns the router's last refused write, for the compile step.
func (r *RouterReconciler) refusals(router types.NamespacedName) map[string]rolegraph.WriteRefusal {
	v, ok := r.refused.Load(router)
	if !ok {
		return nil
	}
	return map[string]rolegraph.WriteRefusal{router.Name: v.(rolegraph.WriteRefusal)}
}

// noteRollout records how the router's rollout went: a refusal is kept
// for the compile step and reported, anything else forgets the last one.
// It returns whether the roles' status must be compiled again: a refusal
// that is new, or one that is over.
func (r *RouterReconciler) noteRollout(ctx context.Context, router types.NamespacedName, err error) (changed bool, refusal *workload.Refused) {
	var wr *workload.Refused
	if !errors.As(err, &wr) {
		if err == nil {
			_, had := r.refused.LoadAndDelete(router)
			return had, nil
		}
		return false, nil
	}
	now := rolegraph.WriteRefusal{Hash: wr.Hash, Kind: wr.Workload.Kind, Name: wr.Workload.Name, Message: wr.Message}
	old, had := r.refused.Swap(router, now)
	ctrl.LoggerFrom(ctx).Info("Config not written: the write was refused", "workload", wr.Workload.Kind+"/"+wr.Workload.Name, "hash", wr.Hash, "why", wr.Message)
	return !had || old.(rolegraph.WriteRefusal) != now, wr
}
