package dynamo

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// FieldOwner is the field manager of the stand-in's writes.
const FieldOwner = "dynamo-operator"

// AddToScheme adds what the stand-in reads and writes to a scheme: the
// DynamoGraphDeployment types and Kubernetes' built-in ones.
func AddToScheme(s *runtime.Scheme) error {
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return err
	}
	return v1beta1.AddToScheme(s)
}

// NewScheme returns a scheme with AddToScheme's types.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(AddToScheme(s))
	return s
}

// StandIn is a stand-in for Dynamo's operator, for the tests (Dynamo's
// operator cannot be fetched as a Go module here). It reconciles
// DynamoGraphDeployments on the Deployment path: each component becomes a
// DynamoComponentDeployment controlled by the graph, and a Deployment of the
// same name controlled by that DynamoComponentDeployment (ComponentName
// names them: {graph}-{component}, with the graph's worker hash after a
// worker's; RenderDeployment says what the Deployment holds). A Deployment
// whose rendered spec changed, or whose generation is past the one the
// stand-in last wrote (someone else edited it), gets the whole rendered
// spec back by a plain Update. A change of a worker's spec moves the worker
// hash: the workers roll onto new objects, and the old ones are deleted
// once the new Deployment of their component is ready. The graph's status
// follows the Deployments' rollout.
//
// Run it in a manager of its own, as Dynamo's operator runs in a process of
// its own, whose scheme has AddToScheme's types.
type StandIn struct {
	// Client reads and writes graphs and Deployments; the manager's
	// client (cached reads) is the usual one.
	Client client.Client
	// Name is the controller's name; "dynamo-stand-in" when empty.
	// Two managers in one process need distinct names (or
	// SkipNameValidation).
	Name string
}

// SetupWithManager registers the stand-in with mgr: it reconciles a graph
// when its spec changes and when one of its Deployments changes.
func (s *StandIn) SetupWithManager(mgr ctrl.Manager) error {
	if s.Client == nil {
		s.Client = mgr.GetClient()
	}
	name := s.Name
	if name == "" {
		name = "dynamo-stand-in"
	}
	// The Deployments belong to the graph through a DynamoComponentDeployment;
	// Dynamo's graph label leads back to the graph.
	toGraph := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		g := o.GetLabels()[LabelGraph]
		if g == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: g}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&v1beta1.DynamoGraphDeployment{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&v1beta1.DynamoComponentDeployment{}).
		Watches(&appsv1.Deployment{}, toGraph).
		Complete(s)
}

// Reconcile renders a graph's components and then writes its status.
func (s *StandIn) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dgd := &v1beta1.DynamoGraphDeployment{}
	if err := s.Client.Get(ctx, req.NamespacedName, dgd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !dgd.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	deps := make([]*appsv1.Deployment, len(dgd.Spec.Components))
	for i := range dgd.Spec.Components {
		comp := &dgd.Spec.Components[i]
		dcd, err := s.syncComponent(ctx, dgd, comp)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("component %q: %w", comp.ComponentName, err)
		}
		dep, err := s.syncDeployment(ctx, dcd, RenderDeployment(dgd, comp))
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("component %q: %w", comp.ComponentName, err)
		}
		deps[i] = dep
	}
	old, err := s.retireOld(ctx, dgd, deps)
	if err != nil {
		return ctrl.Result{}, err
	}
	st := graphStatus(dgd, deps, old)
	if equality.Semantic.DeepEqual(st, dgd.Status) {
		return ctrl.Result{}, nil
	}
	dgd.Status = st
	// An Update, not a patch: were the graph changed since it was read,
	// the write fails and the next reconcile reports the new generation.
	if err := s.Client.Status().Update(ctx, dgd, client.FieldOwner(FieldOwner)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the graph's status: %w", err)
	}
	return ctrl.Result{}, nil
}

// syncDeployment creates the rendered Deployment, or replaces the existing
// one's spec when the rendered spec changed or someone else changed it, and
// returns the Deployment as the API server last returned or the cache
// holds it.
func (s *StandIn) syncDeployment(ctx context.Context, dcd *v1beta1.DynamoComponentDeployment, want *appsv1.Deployment) (*appsv1.Deployment, error) {
	logger := log.FromContext(ctx).WithValues("deployment", want.Name)
	hash, err := specHash(&want.Spec)
	if err != nil {
		return nil, err
	}
	cur := &appsv1.Deployment{}
	err = s.Client.Get(ctx, client.ObjectKeyFromObject(want), cur)
	if apierrors.IsNotFound(err) {
		if err := ctrl.SetControllerReference(dcd, want, s.Client.Scheme()); err != nil {
			return nil, err
		}
		want.Annotations[AnnotationLastAppliedHash] = hash
		want.Annotations[AnnotationLastAppliedGeneration] = "1"
		if err := s.Client.Create(ctx, want, client.FieldOwner(FieldOwner)); err != nil {
			return nil, fmt.Errorf("creating Deployment %s: %w", want.Name, err)
		}
		logger.Info("Created Deployment")
		return want, nil
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(cur, dcd) {
		return nil, fmt.Errorf("a Deployment %s exists that DynamoComponentDeployment %s does not control", want.Name, dcd.Name)
	}

	lastGen, genErr := strconv.ParseInt(cur.Annotations[AnnotationLastAppliedGeneration], 10, 64)
	manual := genErr == nil && cur.Generation > lastGen
	if cur.Annotations[AnnotationLastAppliedHash] == hash && genErr == nil && !manual {
		return cur, nil
	}
	if manual {
		logger.Info("Manual changes detected on Deployment, will be overwritten",
			"generation", cur.Generation, "lastAppliedGeneration", lastGen)
	}
	cur.Spec = want.Spec
	cur.Labels = want.Labels
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	for k, v := range want.Annotations {
		cur.Annotations[k] = v
	}
	predicted := cur.Generation + 1
	cur.Annotations[AnnotationLastAppliedHash] = hash
	cur.Annotations[AnnotationLastAppliedGeneration] = strconv.FormatInt(predicted, 10)
	if err := s.Client.Update(ctx, cur, client.FieldOwner(FieldOwner)); err != nil {
		return nil, fmt.Errorf("updating Deployment %s: %w", want.Name, err)
	}
	logger.Info("Updated Deployment", "generation", cur.Generation, "hash", hash)
	if cur.Generation != predicted {
		// The write changed the spec less than the hash says (the API
		// server's defaults filled the difference): stamp the generation
		// the Deployment has, so that the next edit by someone else is
		// seen. A metadata change leaves the generation alone.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationLastAppliedGeneration, strconv.FormatInt(cur.Generation, 10))
		if err := s.Client.Patch(ctx, cur, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(FieldOwner)); err != nil {
			return nil, fmt.Errorf("stamping Deployment %s's generation: %w", want.Name, err)
		}
	}
	return cur, nil
}

// syncComponent creates or updates the DynamoComponentDeployment a
// component is rendered into, controlled by the graph.
func (s *StandIn) syncComponent(ctx context.Context, dgd *v1beta1.DynamoGraphDeployment, comp *v1beta1.DynamoComponentDeploymentSharedSpec) (*v1beta1.DynamoComponentDeployment, error) {
	want := v1beta1.DynamoComponentDeploymentSpec{DynamoComponentDeploymentSharedSpec: *comp.DeepCopy(), BackendFramework: dgd.Spec.BackendFramework}
	dcd := &v1beta1.DynamoComponentDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: dgd.Namespace, Name: ComponentName(dgd, comp)}}
	err := s.Client.Get(ctx, client.ObjectKeyFromObject(dcd), dcd)
	switch {
	case apierrors.IsNotFound(err):
		dcd.Labels = map[string]string{LabelGraph: dgd.Name, LabelComponent: comp.ComponentName}
		dcd.Spec = want
		if err := ctrl.SetControllerReference(dgd, dcd, s.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := s.Client.Create(ctx, dcd, client.FieldOwner(FieldOwner)); err != nil {
			return nil, fmt.Errorf("creating DynamoComponentDeployment %s: %w", dcd.Name, err)
		}
		return dcd, nil
	case err != nil:
		return nil, err
	case !metav1.IsControlledBy(dcd, dgd):
		return nil, fmt.Errorf("a DynamoComponentDeployment %s exists that this graph does not control", dcd.Name)
	case equality.Semantic.DeepEqual(dcd.Spec, want):
		return dcd, nil
	}
	dcd.Spec = want
	if err := s.Client.Update(ctx, dcd, client.FieldOwner(FieldOwner)); err != nil {
		return nil, fmt.Errorf("updating DynamoComponentDeployment %s: %w", dcd.Name, err)
	}
	return dcd, nil
}

// retireOld finds the graph's objects that no component is rendered into
// any more: those of a worker before its worker hash moved (or of a
// component whose type changed). An old object whose component's new
// Deployment is ready is deleted, with its DynamoComponentDeployment; the
// others are returned by component name, still rolling.
func (s *StandIn) retireOld(ctx context.Context, dgd *v1beta1.DynamoGraphDeployment, deps []*appsv1.Deployment) (map[string][]string, error) {
	var list v1beta1.DynamoComponentDeploymentList
	if err := s.Client.List(ctx, &list, client.InNamespace(dgd.Namespace), client.MatchingLabels{LabelGraph: dgd.Name}); err != nil {
		return nil, err
	}
	current := map[string]int{}
	for i, dep := range deps {
		current[dep.Name] = i
	}
	var old map[string][]string
	for i := range list.Items {
		dcd := &list.Items[i]
		if _, ok := current[dcd.Name]; ok || !metav1.IsControlledBy(dcd, dgd) {
			continue
		}
		comp := dcd.Labels[LabelComponent]
		if c := dgd.Component(comp); c != nil {
			if j := slices.IndexFunc(deps, func(d *appsv1.Deployment) bool { return d.Labels[LabelComponent] == comp }); j >= 0 {
				if reason, _, _ := componentReadiness(c, deps[j]); reason != "" {
					if old == nil {
						old = map[string][]string{}
					}
					old[comp] = append(old[comp], dcd.Name)
					continue
				}
			}
		}
		// No garbage collector runs under envtest: delete the Deployment
		// itself, then its owner.
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: dcd.Namespace, Name: dcd.Name}}
		if err := s.Client.Delete(ctx, dep); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting the old Deployment %s: %w", dep.Name, err)
		}
		if err := s.Client.Delete(ctx, dcd); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting the old DynamoComponentDeployment %s: %w", dcd.Name, err)
		}
		log.FromContext(ctx).Info("Deleted the objects of an old worker hash", "dynamoComponentDeployment", dcd.Name)
	}
	return old, nil
}
