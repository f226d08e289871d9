package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
)

// NewNamespace creates a namespace named prefix-XXXXX for t and deletes it
// when t ends. No namespace controller runs in a test control plane, so
// the deleted namespace stays Terminating with what it holds: names never
// collide, and a test cannot create in another's namespace.
func NewNamespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// Create creates objs, failing t on the first error.
func Create(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// Update re-reads obj, applies change and writes it back, retrying on a
// conflict with the manager's status writes.
func Update[T client.Object](t testing.TB, c client.Client, timeout time.Duration, obj T, change func(T)) {
	t.Helper()
	Eventually(t, timeout, "updating "+obj.GetName(), func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(ctx, obj)
	})
}

// Objects decodes every document of a YAML or JSON stream (a manifest,
// kustomize's output), skipping empty ones.
func Objects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("document %d: %w", len(out)+1, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Want is the condition WaitCondition waits for.
type Want struct {
	Status metav1.ConditionStatus
	// Reason is the reason wanted; empty: any.
	Reason string
	// MessageContains is a text the message must contain.
	MessageContains string
	// Generation is the observedGeneration wanted: 0, the object's
	// current generation; AnyGeneration, any (a RouterRole's Programmed
	// reports the generation that runs, which may be an older one).
	Generation int64
}

// AnyGeneration is Want.Generation for a condition of any generation.
const AnyGeneration = -1

// WaitCondition waits until obj (re-read into obj) has the condition typ
// as want says, and returns it.
func WaitCondition(t testing.TB, c client.Client, timeout time.Duration, obj client.Object, typ string, want Want) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	what := fmt.Sprintf("%T %s/%s %s=%s", obj, obj.GetNamespace(), obj.GetName(), typ, want.Status)
	if want.Reason != "" {
		what += " reason " + want.Reason
	}
	if want.MessageContains != "" {
		what += fmt.Sprintf(" message with %q", want.MessageContains)
	}
	Eventually(t, timeout, what, func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		cond, err := Condition(obj, typ)
		if err != nil {
			return err
		}
		if err := want.check(cond, obj.GetGeneration()); err != nil {
			return err
		}
		got = *cond
		return nil
	})
	return got
}

// check says how cond differs from w, for an object at generation gen.
func (w Want) check(cond *metav1.Condition, gen int64) error {
	switch {
	case cond.Status != w.Status || (w.Reason != "" && cond.Reason != w.Reason) || !strings.Contains(cond.Message, w.MessageContains):
		return fmt.Errorf("%s=%s reason %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	case w.Generation == 0 && cond.ObservedGeneration != gen:
		return fmt.Errorf("%s is for generation %d, the object is at %d", cond.Type, cond.ObservedGeneration, gen)
	case w.Generation > 0 && cond.ObservedGeneration != w.Generation:
		return fmt.Errorf("%s is for generation %d, want %d", cond.Type, cond.ObservedGeneration, w.Generation)
	}
	return nil
}

// Condition returns obj's status.conditions entry of type typ, whatever
// obj's Go type, or an error saying it has none.
func Condition(obj runtime.Object, typ string) (*metav1.Condition, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	status, _ := u["status"].(map[string]any)
	list, _ := status["conditions"].([]any)
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m["type"] != typ {
			continue
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			return nil, fmt.Errorf("condition %s: %w", typ, err)
		}
		return &c, nil
	}
	return nil, fmt.Errorf("no %s condition yet", typ)
}

// Params is hint parameters as the API holds them.
func Params(p map[string]any) *apiextensionsv1.JSON {
	js, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("hint parameters %v: %v", p, err))
	}
	return &apiextensionsv1.JSON{Raw: js}
}

// Hint is an inline hint item of type typ; nil params: the type's defaults.
func Hint(typ string, params map[string]any) v1alpha1.HintItem {
	h := v1alpha1.HintItem{Type: typ}
	if params != nil {
		h.Parameters = Params(params)
	}
	return h
}

// NamedHint is Hint with a name, as a role that runs a type twice names
// each instance.
func NamedHint(name, typ string, params map[string]any) v1alpha1.HintItem {
	h := Hint(typ, params)
	h.Name = name
	return h
}

// PolicyRef is a hint item that runs the HintPolicy name of the role's
// namespace.
func PolicyRef(name string) v1alpha1.HintItem {
	return v1alpha1.HintItem{PolicyRef: &v1alpha1.HintPolicyReference{Name: name}}
}

// RouterRole is a RouterRole of router for role in ns, named name, with
// Dynamo's default worker selection and hints.
func RouterRole(ns, name, router, role string, hints ...v1alpha1.HintItem) *v1alpha1.RouterRole {
	return &v1alpha1.RouterRole{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RouterRoleSpec{
			Router: router, Role: role,
			WorkerSelection: v1alpha1.WorkerSelection{Type: "dynamo-default-cost-fn"},
			Hints:           hints,
		},
	}
}

// HintPolicy is a HintPolicy of type typ in ns; nil params: the type's
// defaults.
func HintPolicy(ns, name, typ string, params map[string]any) *v1alpha1.HintPolicy {
	hp := &v1alpha1.HintPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.HintPolicySpec{Type: typ},
	}
	if params != nil {
		hp.Spec.Parameters = Params(params)
	}
	return hp
}

// RouterPod is a pod of router in ns, labelled as the manager counts
// router pods, with one container "router" and no service account token.
// No kubelet runs it unless it is placed on controlplane.FakeNode.
func RouterPod(ns, name, router string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.RouterLabel: router}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptrTo(false),
			Containers:                   []corev1.Container{{Name: "router", Image: "registry.invalid/router:test"}},
		},
	}
}

// RouterDeployment is a Dynamo frontend Deployment of router in ns as its
// owner writes it: labelled for the router, opted in with its router
// container "frontend", started with args (none: --router-mode kv), with
// no policy file of its own (the manager adds it), rolling 25% at a time.
// Its pods run on controlplane.FakeNode (Options.Kwok).
func RouterDeployment(ns, router string, replicas int32, args ...string) *appsv1.Deployment {
	if args == nil {
		args = []string{"--router-mode", "kv"}
	}
	app := router + "-frontend"
	labels := map[string]string{"app": app, v1alpha1.RouterLabel: router}
	surge := intstr.FromString("25%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: app,
			Labels:      map[string]string{v1alpha1.RouterLabel: router},
			Annotations: map[string]string{v1alpha1.RouterContainerAnnotation: "frontend"},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeName:                     controlplane.FakeNode,
					AutomountServiceAccountToken: ptrTo(false),
					Containers: []corev1.Container{{
						Name: "frontend", Image: "dynamo-frontend:test",
						Command: []string{"python", "-m", "dynamo.frontend"},
						Args:    args,
					}},
				},
			},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// CreateRouterPod creates RouterPod(ns, name, router) and, with hash set,
// reports that hash on it as its sidecar does (ReportHash). No kubelet
// runs it: the pod stays Pending, which is all Programmed looks at.
func CreateRouterPod(t testing.TB, c client.Client, ns, router, name, hash string) *corev1.Pod {
	t.Helper()
	pod := RouterPod(ns, name, router)
	Create(t, c, pod)
	if hash != "" {
		ReportHash(t, c, pod, hash)
	}
	return pod
}

// ReportHash does what the sidecar does once it runs a config: it writes
// the config's hash on its own pod, as field manager kvhint-sidecar.
func ReportHash(t testing.TB, c client.Client, pod *corev1.Pod, hash string) {
	t.Helper()
	AnnotateHash(t, c, pod, hash, v1alpha1.SidecarFieldManager)
}

// AnnotateHash writes the applied-hash annotation on pod as fieldManager.
func AnnotateHash(t testing.TB, c client.Client, pod *corev1.Pod, hash, fieldManager string) {
	t.Helper()
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[v1alpha1.AppliedHashAnnotation] = hash
	if err := c.Patch(context.Background(), pod, patch, client.FieldOwner(fieldManager)); err != nil {
		t.Fatalf("annotating pod %s: %v", pod.Name, err)
	}
}

// WaitConfigMap waits until router's hints ConfigMap in ns satisfies
// check (nil: exists), and returns it.
func WaitConfigMap(t testing.TB, c client.Client, timeout time.Duration, ns, router string, check func(*corev1.ConfigMap) error) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	Eventually(t, timeout, "ConfigMap "+v1alpha1.HintsConfigMapName(router), func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.HintsConfigMapName(router)}, cm); err != nil {
			return err
		}
		if check == nil {
			return nil
		}
		return check(cm)
	})
	return cm
}

// CreateFile creates every object of a YAML file in ns, as `kubectl
// create -n ns -f FILE` does, each after edits, and returns them with the
// first refusal.
func CreateFile(t testing.TB, c client.Client, ns, path string, edits ...func(*unstructured.Unstructured)) ([]*unstructured.Unstructured, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		for _, edit := range edits {
			edit(o)
		}
		if err := c.Create(context.Background(), o); err != nil {
			return objs, fmt.Errorf("%s: creating %s %s: %w", path, o.GetKind(), o.GetName(), err)
		}
	}
	return objs, nil
}

// MustCreateFile is CreateFile for a file that must be accepted: a
// refusal fails t.
func MustCreateFile(t testing.TB, c client.Client, ns, path string, edits ...func(*unstructured.Unstructured)) []*unstructured.Unstructured {
	t.Helper()
	objs, err := CreateFile(t, c, ns, path, edits...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
