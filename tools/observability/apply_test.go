package observability_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/tools/observability"
)

// The Prometheus Operator's CRDs this test installs, made by
// controller-gen from the Operator's API types pinned in go.mod.
const operatorAPI = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

var operatorCRDs = []string{"prometheusrules", "servicemonitors", "podmonitors"}

// operatorCRDObjects generates the Operator's CRDs from its API types.
func operatorCRDObjects(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	gen, err := filepath.Abs(filepath.Join("bin", "controller-gen"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", gen, "sigs.k8s.io/controller-tools/cmd/controller-gen").CombinedOutput(); err != nil {
		t.Fatalf("building controller-gen: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command(gen, "crd:maxDescLen=0", "paths="+operatorAPI, "output:crd:dir="+dir).CombinedOutput(); err != nil {
		t.Fatalf("controller-gen on %s: %v\n%s", operatorAPI, err, out)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, plural := range operatorCRDs {
		b, err := os.ReadFile(filepath.Join(dir, "monitoring.coreos.com_"+plural+".yaml"))
		if err != nil {
			t.Fatalf("the generated CRD of %s: %v", plural, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			t.Fatalf("the generated CRD of %s: %v", plural, err)
		}
		crds = append(crds, crd)
	}
	return crds
}

// kustomize renders a kustomization of the repository with the kubectl
// of the assets, into objects.
func kustomize(t *testing.T, kubectl, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(root, dir)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return decodeAll(t, out)
}

func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// TestDefaultLeavesPrometheusOut: config/default, which must apply on a
// cluster without the Prometheus Operator, holds no monitoring objects.
func TestDefaultLeavesPrometheusOut(t *testing.T) {
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	for _, o := range kustomize(t, kubectl, "config/default") {
		if strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") {
			t.Errorf("config/default holds %s %s", o.GetKind(), o.GetName())
		}
	}
}

// TestApplyToAPIServer applies config/prometheus (the PrometheusRule, the
// ServiceMonitor and the PodMonitor) and the dashboard ConfigMap to a
// real kube-apiserver with the Operator's CRDs installed, with strict
// field validation, and reads them back unchanged: no field is unknown to
// the CRDs, none pruned. A PrometheusRule the CRD's schema refuses is
// refused.
func TestApplyToAPIServer(t *testing.T) {
	testenv.RequireAssets(t)
	env := testenv.Start(t, testenv.Options{Name: "observability", CRDs: operatorCRDObjects(t)})
	dir := env.Assets
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c = client.WithFieldValidation(c, metav1.FieldValidationStrict)
	ctx := context.Background()

	objs := kustomize(t, filepath.Join(dir, "kubectl"), "config/prometheus")
	objs = append(objs, decodeAll(t, readRoot(t, observability.DashboardConfigMapPath))...)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	if diff := cmp.Diff(map[string]bool{"PrometheusRule": true, "ServiceMonitor": true, "PodMonitor": true, "ConfigMap": true}, kinds); diff != "" {
		t.Fatalf("objects to apply (-want +got):\n%s", diff)
	}
	for _, ns := range []string{"kvhint-system", "monitoring"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		if o.GetNamespace() == "" {
			o.SetNamespace("monitoring")
		}
		sent := o.DeepCopy()
		if err := c.Create(ctx, o); err != nil {
			t.Errorf("creating %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			continue
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"spec", "data"} {
			if diff := cmp.Diff(sent.Object[field], got.Object[field]); diff != "" {
				t.Errorf("%s %s: %s as stored differs from what was sent (-sent +stored):\n%s", o.GetKind(), o.GetName(), field, diff)
			}
		}
	}

	// The CRD's schema is in force: a for: that is no duration is refused.
	bad := &unstructured.Unstructured{}
	bad.SetAPIVersion("monitoring.coreos.com/v1")
	bad.SetKind("PrometheusRule")
	bad.SetNamespace("monitoring")
	bad.SetName("bad")
	bad.Object["spec"] = map[string]any{"groups": []any{map[string]any{"name": "g", "rules": []any{
		map[string]any{"alert": "A", "expr": "up == 0", "for": "ten minutes"}}}}}
	if err := c.Create(ctx, bad); err == nil {
		t.Error("a PrometheusRule with for: \"ten minutes\" was accepted")
	}
}
