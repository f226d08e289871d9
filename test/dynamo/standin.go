package dynamo

import (
	"context"
	"fmt"
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
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

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
// Deployment {graph}-{component} controlled by the graph (RenderDeployment
// says what it holds); a Deployment whose rendered spec changed, or whose
// generation is past the one the stand-in last wrote (someone else edited
// it), gets the whole rendered spec back by a plain Update; and the graph's
// status follows the Deployments' rollout.
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
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&v1beta1.DynamoGraphDeployment{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
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
	keep := map[string]bool{}
	for i := range dgd.Spec.Components {
		dep, err := s.syncDeployment(ctx, dgd, RenderDeployment(dgd, &dgd.Spec.Components[i]))
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("component %q: %w", dgd.Spec.Components[i].ComponentName, err)
		}
		deps[i] = dep
		keep[dep.Name] = true
	}
	if err := s.deleteDropped(ctx, dgd, keep); err != nil {
		return ctrl.Result{}, err
	}
	st := graphStatus(dgd, deps)
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
func (s *StandIn) syncDeployment(ctx context.Context, dgd *v1beta1.DynamoGraphDeployment, want *appsv1.Deployment) (*appsv1.Deployment, error) {
	logger := log.FromContext(ctx).WithValues("deployment", want.Name)
	hash, err := specHash(&want.Spec)
	if err != nil {
		return nil, err
	}
	cur := &appsv1.Deployment{}
	err = s.Client.Get(ctx, client.ObjectKeyFromObject(want), cur)
	if apierrors.IsNotFound(err) {
		if err := ctrl.SetControllerReference(dgd, want, s.Client.Scheme()); err != nil {
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
	if !metav1.IsControlledBy(cur, dgd) {
		return nil, fmt.Errorf("a Deployment %s exists that this graph does not control", want.Name)
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

// deleteDropped deletes the graph's Deployments whose component is gone.
func (s *StandIn) deleteDropped(ctx context.Context, dgd *v1beta1.DynamoGraphDeployment, keep map[string]bool) error {
	var list appsv1.DeploymentList
	if err := s.Client.List(ctx, &list, client.InNamespace(dgd.Namespace), client.MatchingLabels{LabelGraph: dgd.Name}); err != nil {
		return err
	}
	for i := range list.Items {
		dep := &list.Items[i]
		if keep[dep.Name] || !metav1.IsControlledBy(dep, dgd) {
			continue
		}
		if err := s.Client.Delete(ctx, dep); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Deployment %s of a dropped component: %w", dep.Name, err)
		}
		log.FromContext(ctx).Info("Deleted the Deployment of a dropped component", "deployment", dep.Name)
	}
	return nil
}
