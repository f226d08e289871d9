package workload

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/apiwatch"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
	"github.com/kvrouter/kv-hint-operator/internal/rolegraph"
)

// DynamoGraphDeployments (DGDs) as restart-mode routers: the manager reads
// opted-in DGDs (v1alpha1.GraphOptedIn) and adds its three entries to the
// router component's podTemplate on the DGD, by server-side apply as
// v1alpha1.RolloutFieldManager; Dynamo's operator renders them into the
// Deployment or PodClique it owns. The DGD's CRD is Dynamo's, and a
// cluster may not have it: the manager looks for it in discovery until it
// appears, and only then starts watching DGDs (GraphWatch).
//
// +kubebuilder:rbac:groups=nvidia.com,resources=dynamographdeployments,verbs=get;list;watch;patch

// GraphWatch starts watching DGDs once the API server serves them.
type GraphWatch struct {
	Config     *rest.Config
	Namespaces []string
	// Interval is how often it looks for the CRD until it is served.
	Interval time.Duration
	// Watch starts the watch of the DGDs in c (obj is a DGD) once the
	// cache synced: the router controller's.
	Watch func(c cache.Cache, obj client.Object) error
	// cache reads the router-labelled DGDs once the watch began (the
	// cache of newCache); nil before.
	cache atomic.Pointer[client.Reader]
}

// Reader returns the DGD cache, or nil while the CRD is not served.
func (g *GraphWatch) Reader() client.Reader {
	if g == nil {
		return nil
	}
	if c := g.cache.Load(); c != nil {
		return *c
	}
	return nil
}

// Start implements manager.Runnable: it waits for the DGD CRD, then
// starts a cache of router-labelled DGDs and a watch of it on the router
// controller. A cluster without Dynamo never gets past the wait, and
// nothing else changes.
func (g *GraphWatch) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("kind", dynamograph.Kind, "apiVersion", dynamograph.GroupVersion.String())
	dc, err := discovery.NewDiscoveryClientForConfig(g.Config)
	if err != nil {
		return fmt.Errorf("DynamoGraphDeployment watch: %w", err)
	}
	gvr := dynamograph.GroupVersion.WithResource(dynamograph.Resource)
	return apiwatch.WhenServed(ctx, dc, gvr, g.Interval, func(err error) {
		log.V(1).Info("Looking for the DynamoGraphDeployment CRD", "error", err.Error())
	}, func(ctx context.Context) error { return g.watch(ctx, log) })
}

// watch starts the cache of router-labelled DGDs and its watch on the
// router controller, and runs until ctx ends.
func (g *GraphWatch) watch(ctx context.Context, log logr.Logger) error {
	c, err := g.newCache()
	if err != nil {
		return err
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			log.Error(err, "DynamoGraphDeployment cache stopped")
		}
	}()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dynamograph.GVK)
	// The informer first, then the reader, then the watch: the watch's
	// first events (every DGD, as added) must find the reader set, or a
	// reconcile would see no DGD and nothing would come after it.
	if _, err := c.GetInformer(ctx, u); err != nil {
		return fmt.Errorf("watching DynamoGraphDeployments: %w", err)
	}
	if !c.WaitForCacheSync(ctx) {
		return nil
	}
	var rd client.Reader = c
	g.cache.Store(&rd)
	if err := g.Watch(c, u); err != nil {
		return fmt.Errorf("watching DynamoGraphDeployments: %w", err)
	}
	log.Info("Watching DynamoGraphDeployments: the CRD is served")
	<-ctx.Done()
	return nil
}

// newCache is the cache of router-labelled DGDs: a REST mapper of its own,
// built now that the CRD is served, and of each DGD's managedFields only
// the manager's own entries' times (see rolegraph.ReadGraph).
func (g *GraphWatch) newCache() (cache.Cache, error) {
	hc, err := rest.HTTPClientFor(g.Config)
	if err != nil {
		return nil, fmt.Errorf("DynamoGraphDeployment cache: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(g.Config, hc)
	if err != nil {
		return nil, fmt.Errorf("DynamoGraphDeployment cache: %w", err)
	}
	hasRouter, err := labels.NewRequirement(v1alpha1.RouterLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dynamograph.GVK)
	opts := cache.Options{
		HTTPClient: hc,
		Mapper:     mapper,
		ByObject: map[client.Object]cache.ByObject{
			u: {Label: labels.NewSelector().Add(*hasRouter), Transform: trimGraph},
		},
	}
	if len(g.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range g.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return cache.New(g.Config, opts)
}

// trimGraph keeps of a DGD's managedFields the manager's own entries,
// without their field sets: when it last wrote is all that is read.
func trimGraph(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	var kept []metav1.ManagedFieldsEntry
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == v1alpha1.RolloutFieldManager {
			mf.FieldsV1 = nil
			kept = append(kept, mf)
		}
	}
	u.SetManagedFields(kept)
	return u, nil
}

// graphList is an empty list of DGDs to read into.
func graphList() *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(dynamograph.GroupVersion.WithKind(dynamograph.Kind + "List"))
	return list
}

// Graphs writes opted-in DGDs (v1alpha1.GraphOptedIn).
type Graphs struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Watch reads the DGDs once their CRD is served; nil: never.
	Watch *GraphWatch
}

func (r *Graphs) Kind() string { return dynamograph.Kind }

// List reads the router's DGDs from the cache into in.Graphs, sorted by
// name; none while the CRD is not served.
func (r *Graphs) List(ctx context.Context, namespace, router string, in *rolegraph.Input) error {
	graphs, err := r.list(ctx, namespace, router)
	in.Graphs = graphs
	return err
}

func (r *Graphs) OptedIn(in *rolegraph.Input) bool {
	return slices.ContainsFunc(in.Graphs, func(g dynamograph.Graph) bool { return v1alpha1.GraphOptedIn(g.Annotations) })
}

func (r *Graphs) list(ctx context.Context, namespace, router string) ([]dynamograph.Graph, error) {
	rd := r.Watch.Reader()
	if rd == nil {
		return nil, nil
	}
	list := graphList()
	if err := rd.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.RouterLabel: router}); err != nil {
		return nil, fmt.Errorf("listing the DynamoGraphDeployments of router %s: %w", router, err)
	}
	var out []dynamograph.Graph
	for i := range list.Items {
		g, err := dynamograph.FromUnstructured(&list.Items[i])
		if err != nil {
			// Not the schema this manager reads: not a workload it
			// may write.
			ctrl.LoggerFrom(ctx).Info("Skipping a DynamoGraphDeployment", "error", err.Error())
			continue
		}
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b dynamograph.Graph) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Point writes the manager's three entries to the router component
// of a DGD (see Deployments.Point), by server-side apply as
// v1alpha1.RolloutFieldManager, forced: the component is named by its
// key in spec.components, and its podTemplate's containers, volumes, env
// and mounts merge by their keys.
//
// The apply is first made as a dry run, and its result checked to differ
// from the DGD (read from the API server, not the cache) only by those
// entries; then made on the same resourceVersion. The DGD's schema is Dynamo's: one
// that declared a list of the pod template atomic would have the
// manager's apply replace the whole list (the router container, say),
// and that is refused here instead of written.
func (r *Graphs) Point(ctx context.Context, rev *corev1.ConfigMap, w *rolegraph.Workload, _ *rolegraph.Input) error {
	// The DGD as the API server has it now, not as the cache last saw
	// it: the dry run's result is compared with it, and the apply is
	// made on its resourceVersion, so that a change by anyone else in
	// between fails the write (a conflict, tried again) instead of
	// passing a check made against an older DGD.
	fresh := &unstructured.Unstructured{}
	fresh.SetGroupVersionKind(dynamograph.GVK)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rev.Namespace, Name: w.Name}, fresh); err != nil {
		return client.IgnoreNotFound(err)
	}
	current, err := dynamograph.FromUnstructured(fresh)
	if err != nil {
		return err
	}
	patch, err := GraphEntries(rev.Namespace, w.Name, w.Component, rev.Name, w.Container)
	if err != nil {
		return err
	}
	patch.SetResourceVersion(fresh.GetResourceVersion())
	// The entries the manager wrote in a component that no longer runs
	// the router: the apply releases them, and a refusal names them.
	held := entriesElsewhere(current, w.Component)
	refused := func(err error) error {
		msg := fmt.Sprintf("DynamoGraphDeployment %s: the manager's write of its entries to component %q (ConfigMap %s) was refused: %v", w.Name, w.Component, rev.Name, err)
		if len(held) > 0 {
			msg += fmt.Sprintf("; the manager's entries it would release stay in the former router's %s", strings.Join(held, "; "))
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(graphRef(current), nil, corev1.EventTypeWarning, "PolicyConfigNotWritten", "Roll", "%s", msg)
		}
		return &Refused{Workload: w, Hash: revisionHash(rev), Message: msg}
	}
	dry := patch.DeepCopy()
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(dry), client.FieldOwner(v1alpha1.RolloutFieldManager), client.ForceOwnership, client.DryRunAll); err != nil {
		if isRefusal(err) {
			return refused(fmt.Errorf("dry run: %w", err))
		}
		return fmt.Errorf("pointing DynamoGraphDeployment %s at ConfigMap %s (dry run): %w", w.Name, rev.Name, err)
	}
	if err := checkGraphWrite(current, dry, w.Component, rev.Name, w.Container); err != nil {
		return refused(err)
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner(v1alpha1.RolloutFieldManager), client.ForceOwnership); err != nil {
		if isRefusal(err) {
			return refused(err)
		}
		return fmt.Errorf("pointing DynamoGraphDeployment %s at ConfigMap %s: %w", w.Name, rev.Name, err)
	}
	if len(held) > 0 {
		ctrl.LoggerFrom(ctx).Info("Released the entries of a former router component", "dynamoGraphDeployment", w.Name, "entries", held)
	}
	ctrl.LoggerFrom(ctx).Info("Rolling out config", "dynamoGraphDeployment", w.Name, "component", w.Component, "container", w.Container, "from", w.References, "to", rev.Name)
	if r.Recorder != nil {
		from := "none"
		if w.References != "" {
			from = w.References
		}
		r.Recorder.Eventf(graphRef(current), nil, corev1.EventTypeNormal, "PolicyConfigChanged", "Roll",
			"component %s: volume %s on ConfigMap %s (was %s), the compiled config, mounted at %s in container %s", w.Component, v1alpha1.PolicyVolumeName, rev.Name, from, v1alpha1.PolicyMountPath, w.Container)
	}
	return nil
}

// graphRef is a DGD as an object events can be recorded on.
func graphRef(g *dynamograph.Graph) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dynamograph.GVK)
	u.SetNamespace(g.Namespace)
	u.SetName(g.Name)
	u.SetUID(g.UID)
	return u
}

// GraphEntries is the manager's apply to a DGD: the three entries of
// PolicyEntries in the podTemplate of one component, nothing else.
func GraphEntries(namespace, name, component, revision, container string) (*unstructured.Unstructured, error) {
	js, err := json.Marshal(PolicyEntries(revision, container))
	if err != nil {
		return nil, err
	}
	var tmpl map[string]any
	if err := json.Unmarshal(js, &tmpl); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"components": []any{map[string]any{"name": component, "podTemplate": tmpl}},
		},
	}}
	u.SetGroupVersionKind(dynamograph.GVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u, nil
}

// checkGraphWrite checks the result of the manager's apply (after, a dry
// run's) against the DGD before it: the same spec but for the router
// component's podTemplate, and that the same but for the three entries.
func checkGraphWrite(before *dynamograph.Graph, after *unstructured.Unstructured, component, revision, container string) error {
	got, err := dynamograph.FromUnstructured(after)
	if err != nil {
		return err
	}
	refused := "the manager's server-side apply of its three entries to component %q would change %s too; the CRD's schema must merge podTemplate's containers, volumes, env and volumeMounts by key (x-kubernetes-list-type: map, as Kubernetes' own types declare): nothing is written"
	if !equality.Semantic.DeepEqual(specWithoutTemplate(before.Object, component), specWithoutTemplate(after.Object, component)) {
		return fmt.Errorf(refused, component, "other fields of spec")
	}
	b, a := before.Component(component), got.Component(component)
	if b == nil || a == nil || b.PodTemplate == nil || a.PodTemplate == nil {
		return fmt.Errorf(refused, component, "the component itself")
	}
	want := b.PodTemplate.DeepCopy()
	addEntries(want, revision, container)
	if !equality.Semantic.DeepEqual(normalizedTemplate(want), normalizedTemplate(a.PodTemplate)) {
		return fmt.Errorf(refused, component, "other fields of its podTemplate")
	}
	return nil
}

// specWithoutTemplate is a DGD's spec, as read, with one component's
// podTemplate left out and the manager's entries left out of the other
// components' (see withoutEntries): the manager's apply names only the
// router component, so the API server removes what the manager alone
// wrote in a component that ran the router before, and that release is
// the one change it may make there.
func specWithoutTemplate(obj map[string]any, component string) any {
	spec, _, _ := unstructured.NestedMap(obj, "spec")
	if spec == nil {
		return nil
	}
	spec = runtime.DeepCopyJSON(spec)
	comps, _, _ := unstructured.NestedSlice(spec, "components")
	for _, c := range comps {
		m, ok := c.(map[string]any)
		switch {
		case !ok:
		case m["name"] == component:
			delete(m, "podTemplate")
		default:
			if tmpl, ok := m["podTemplate"].(map[string]any); ok {
				withoutEntries(tmpl)
			}
		}
	}
	if comps != nil {
		spec["components"] = comps
	}
	return spec
}

// addEntries sets the manager's three entries in a pod template, as
// server-side apply merges them.
func addEntries(t *corev1.PodTemplateSpec, revision, container string) {
	vol := corev1.Volume{Name: v1alpha1.PolicyVolumeName, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: revision}},
	}}
	t.Spec.Volumes = slices.DeleteFunc(t.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol.Name })
	t.Spec.Volumes = append(t.Spec.Volumes, vol)
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == v1alpha1.PolicyMountPath })
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol.Name, MountPath: v1alpha1.PolicyMountPath, ReadOnly: true})
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v1alpha1.RouterPolicyConfigEnv })
		c.Env = append(c.Env, corev1.EnvVar{Name: v1alpha1.RouterPolicyConfigEnv, Value: v1alpha1.PolicyFilePath})
	}
}

// normalizedTemplate orders the lists server-side apply merges by key,
// whose order an apply may change, and drops what the API server fills
// in on the manager's volume (defaultMode).
func normalizedTemplate(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	t = t.DeepCopy()
	slices.SortFunc(t.Spec.Volumes, func(a, b corev1.Volume) int { return cmp.Compare(a.Name, b.Name) })
	for i := range t.Spec.Volumes {
		if v := &t.Spec.Volumes[i]; v.Name == v1alpha1.PolicyVolumeName && v.ConfigMap != nil {
			v.ConfigMap.DefaultMode = nil
		}
	}
	slices.SortFunc(t.Spec.Containers, func(a, b corev1.Container) int { return cmp.Compare(a.Name, b.Name) })
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		slices.SortFunc(c.Env, func(a, b corev1.EnvVar) int { return cmp.Compare(a.Name, b.Name) })
		slices.SortFunc(c.VolumeMounts, func(a, b corev1.VolumeMount) int { return cmp.Compare(a.MountPath, b.MountPath) })
	}
	return t
}

// withoutEntries removes the manager's three entries, as it writes them,
// from a pod template read as unstructured, and the lists they leave
// empty.
func withoutEntries(tmpl map[string]any) {
	spec, ok := tmpl["spec"].(map[string]any)
	if !ok {
		return
	}
	drop := func(m map[string]any, key string, is func(map[string]any) bool) {
		list, ok := m[key].([]any)
		if !ok {
			return
		}
		list = slices.DeleteFunc(slices.Clone(list), func(e any) bool {
			em, ok := e.(map[string]any)
			return ok && is(em)
		})
		if len(list) == 0 {
			delete(m, key)
		} else {
			m[key] = list
		}
	}
	drop(spec, "volumes", func(v map[string]any) bool { return v["name"] == v1alpha1.PolicyVolumeName })
	containers, _ := spec["containers"].([]any)
	for _, c := range containers {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		drop(cm, "volumeMounts", func(m map[string]any) bool {
			return m["name"] == v1alpha1.PolicyVolumeName && m["mountPath"] == v1alpha1.PolicyMountPath
		})
		drop(cm, "env", func(e map[string]any) bool {
			return e["name"] == v1alpha1.RouterPolicyConfigEnv && e["value"] == v1alpha1.PolicyFilePath
		})
	}
}

// entriesElsewhere names, component by component, the manager's entries
// a DGD holds outside its router component: what the manager's next apply
// releases, and what holds the owner's changes to those components until
// it has.
func entriesElsewhere(g *dynamograph.Graph, component string) []string {
	var out []string
	for _, c := range g.Spec.Components {
		if c.Name == component || c.PodTemplate == nil {
			continue
		}
		var fields []string
		for _, v := range c.PodTemplate.Spec.Volumes {
			if v.Name == v1alpha1.PolicyVolumeName {
				fields = append(fields, "volume "+v.Name)
			}
		}
		for _, ct := range c.PodTemplate.Spec.Containers {
			for _, m := range ct.VolumeMounts {
				if m.Name == v1alpha1.PolicyVolumeName {
					fields = append(fields, fmt.Sprintf("the mount at %s in container %s", m.MountPath, ct.Name))
				}
			}
			for _, e := range ct.Env {
				if e.Name == v1alpha1.RouterPolicyConfigEnv && e.Value == v1alpha1.PolicyFilePath {
					fields = append(fields, fmt.Sprintf("env %s in container %s", e.Name, ct.Name))
				}
			}
		}
		if len(fields) > 0 {
			out = append(out, fmt.Sprintf("component %q: %s", c.Name, strings.Join(fields, ", ")))
		}
	}
	return out
}
