package chart

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

var (
	repo      = filepath.Join("..", "..")
	chartDir  = filepath.Join(repo, "charts", "kv-hint-operator")
	namespace = "kvhint-system"
)

// valueSets are the value sets every test renders: the defaults, and one
// set per group of switches.
var valueSets = map[string]map[string]any{
	"defaults":   nil,
	"namespaced": {"namespaced": map[string]any{"enable": true, "namespaces": []any{"routers", "chat"}}},
	"scheduling": {"manager": map[string]any{
		"replicas":          3,
		"image":             map[string]any{"repository": "registry.example.com/kvhint", "tag": "v1.2.3", "pullPolicy": "Always"},
		"args":              []any{"--zap-log-level=debug"},
		"priorityClassName": "system-cluster-critical",
		"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "control", "effect": "NoSchedule"}},
		"affinity": map[string]any{"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
			map[string]any{"weight": 100, "podAffinityTerm": map[string]any{
				"topologyKey":   "kubernetes.io/hostname",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "kvhint-manager"}},
			}},
		}}},
		"topologySpreadConstraints": []any{map[string]any{
			"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "kvhint-manager"}},
		}},
		"podSecurityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		"resources":          map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "512Mi"}},
	}},
	"unix-socket-injection": {"injection": map[string]any{
		"image":     map[string]any{"repository": "registry.example.com/kvhint-custom", "tag": "v9"},
		"listen":    "unix:///run/kvhint/booking.sock",
		"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "128Mi"}, "limits": map[string]any{"cpu": "1", "memory": "512Mi"}},
	}},
	"network-policy-and-namespace": {"networkPolicy": map[string]any{"enable": true}, "namespace": map[string]any{"create": true}, "metrics": map[string]any{"port": 9443}},
	"no-crds-no-injection":         {"crds": map[string]any{"enable": false}, "injection": map[string]any{"enable": false}},
	"crds-not-kept":                {"crds": map[string]any{"keep": false}, "admissionPolicies": map[string]any{"enable": false}},
}

func render(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	c, err := Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(c, vals, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func ident(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// content is what the comparison reads: the object without its metadata
// (labels and annotations differ by design: Helm's own labels, the chart's
// resource policy), name and namespace aside.
//
// Strings are compared with their runs of white space collapsed: the
// chart re-serializes config/'s files through Helm's YAML library, which
// reads a folded block scalar's more-indented lines (the admission
// policies' CEL) with one line break fewer than kustomize's does; CEL
// reads both the same.
func content(u *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	for k, v := range u.Object {
		if k != "metadata" && k != "status" {
			out[k] = collapse(v)
		}
	}
	return out
}

func collapse(v any) any {
	switch x := v.(type) {
	case string:
		return strings.Join(strings.Fields(x), " ")
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = collapse(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = collapse(e)
		}
		return l
	}
	return v
}

// TestDefaultsRenderKustomize: with default values the chart renders the
// objects of `kustomize build config/default`, each with the same kind,
// namespace, name and everything but metadata (spec, rules, data, ...),
// except the Namespace, which Helm leaves to --create-namespace.
func TestDefaultsRenderKustomize(t *testing.T) {
	want, err := Kustomize(filepath.Join(repo, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	got := render(t, nil)
	index := func(objs []*unstructured.Unstructured) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				continue
			}
			if _, dup := m[ident(o)]; dup {
				t.Errorf("%s twice", ident(o))
			}
			m[ident(o)] = content(o)
		}
		return m
	}
	w, g := index(want), index(got)
	var keys []string
	for k := range w {
		keys = append(keys, k)
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case w[k] == nil:
			t.Errorf("the chart renders %s, kustomize does not", k)
		case g[k] == nil:
			t.Errorf("kustomize builds %s, the chart does not", k)
		default:
			if diff := cmp.Diff(w[k], g[k]); diff != "" {
				t.Errorf("%s (-kustomize +chart):\n%s", k, diff)
			}
		}
	}
	if len(w) < 20 {
		t.Errorf("kustomize built only %d objects", len(w))
	}
}

// TestLint runs helm lint's rules (Chart.yaml, values against the schema,
// templates in strict mode, CRDs) with every value set.
func TestLint(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			l := lint.RunAll(chartDir, vals, namespace)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

// TestValueSets renders each value set and checks what it switches.
func TestValueSets(t *testing.T) {
	find := func(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
				return o
			}
		}
		return nil
	}
	kinds := func(objs []*unstructured.Unstructured) map[string]int {
		m := map[string]int{}
		for _, o := range objs {
			m[o.GetKind()]++
		}
		return m
	}
	str := func(o *unstructured.Unstructured, path ...string) string {
		s, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
		return fmt.Sprint(s)
	}
	t.Run("namespaced", func(t *testing.T) {
		objs := render(t, valueSets["namespaced"])
		if find(objs, "ClusterRoleBinding", "", "kvhint-manager") != nil {
			t.Error("namespaced mode binds the manager's role cluster-wide")
		}
		for _, ns := range []string{"routers", "chat"} {
			if find(objs, "RoleBinding", ns, "kvhint-manager") == nil {
				t.Errorf("no RoleBinding in %s", ns)
			}
		}
		dep := find(objs, "Deployment", namespace, "kvhint-manager")
		if args := str(dep, "spec", "template", "spec", "containers"); !strings.Contains(args, "--namespace=routers,chat") {
			t.Errorf("manager args lack --namespace=routers,chat: %s", args)
		}
	})
	t.Run("scheduling", func(t *testing.T) {
		dep := find(render(t, valueSets["scheduling"]), "Deployment", namespace, "kvhint-manager")
		spec := str(dep, "spec", "template", "spec")
		for _, want := range []string{"registry.example.com/kvhint:v1.2.3", "imagePullPolicy:Always", "system-cluster-critical",
			"kubernetes.io/os:linux", "dedicated", "podAntiAffinity", "topology.kubernetes.io/zone", "runAsUser:65532", "memory:512Mi", "--zap-log-level=debug"} {
			if !strings.Contains(spec, want) {
				t.Errorf("manager pod spec lacks %q: %s", want, spec)
			}
		}
		if r := str(dep, "spec", "replicas"); r != "3" {
			t.Errorf("replicas %s", r)
		}
	})
	t.Run("image tag defaults to appVersion", func(t *testing.T) {
		c, err := Load(chartDir)
		if err != nil {
			t.Fatal(err)
		}
		c.Metadata.AppVersion = "v7.7.7"
		objs, err := Render(c, nil, namespace)
		if err != nil {
			t.Fatal(err)
		}
		if s := str(find(objs, "Deployment", namespace, "kvhint-manager"), "spec", "template", "spec", "containers"); !strings.Contains(s, "ghcr.io/kvrouter/kvhint:v7.7.7") {
			t.Errorf("manager image not tagged with appVersion v7.7.7: %s", s)
		}
		if s := str(find(objs, "ConfigMap", namespace, "kvhint-sidecar-injection"), "data", "image"); s != "ghcr.io/kvrouter/kvhint:v7.7.7" {
			t.Errorf("injected sidecar image %q", s)
		}
	})
	t.Run("unix-socket-injection", func(t *testing.T) {
		cm := find(render(t, valueSets["unix-socket-injection"]), "ConfigMap", namespace, "kvhint-sidecar-injection")
		want := map[string]string{"image": "registry.example.com/kvhint-custom:v9", "listen": "unix:///run/kvhint/booking.sock", "listenMode": "0660",
			"socketGroup": "2000", "cpuRequest": "500m", "memoryRequest": "128Mi", "cpuLimit": "1", "memoryLimit": "512Mi", "imagePullPolicy": "IfNotPresent"}
		got, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("injection parameters (-want +got):\n%s", diff)
		}
	})
	t.Run("network-policy-and-namespace", func(t *testing.T) {
		objs := render(t, valueSets["network-policy-and-namespace"])
		if find(objs, "NetworkPolicy", namespace, "kvhint-manager") == nil || find(objs, "Namespace", "", namespace) == nil {
			t.Errorf("no NetworkPolicy or Namespace: %v", kinds(objs))
		}
		if s := str(find(objs, "Service", namespace, "kvhint-manager-metrics"), "spec", "ports"); !strings.Contains(s, "9443") {
			t.Errorf("metrics Service ports %s", s)
		}
	})
	t.Run("no-crds-no-injection", func(t *testing.T) {
		k := kinds(render(t, valueSets["no-crds-no-injection"]))
		if k["CustomResourceDefinition"] != 0 || k["MutatingAdmissionPolicy"] != 0 || k["MutatingAdmissionPolicyBinding"] != 0 || k["ValidatingAdmissionPolicy"] != 4 {
			t.Errorf("kinds %v", k)
		}
	})
	t.Run("crds kept by default, not when keep is off", func(t *testing.T) {
		for set, keep := range map[string]bool{"defaults": true, "crds-not-kept": false} {
			n := 0
			for _, o := range render(t, valueSets[set]) {
				if o.GetKind() == "CustomResourceDefinition" {
					n++
					if got := o.GetAnnotations()["helm.sh/resource-policy"] == "keep"; got != keep {
						t.Errorf("%s: CRD %s keep %v, want %v", set, o.GetName(), got, keep)
					}
				}
			}
			if n != 3 {
				t.Errorf("%s: %d CRDs, want 3 (RouterRole, HintPolicy, RouterRollout)", set, n)
			}
		}
	})
	t.Run("monitoring switches", func(t *testing.T) {
		k := kinds(render(t, nil))
		if k["ServiceMonitor"] != 0 || k["PrometheusRule"] != 0 {
			t.Errorf("monitoring on by default: %v", k)
		}
		objs := render(t, map[string]any{"serviceMonitor": map[string]any{"enable": true, "labels": map[string]any{"release": "prom"}}})
		sm := find(objs, "ServiceMonitor", namespace, "kvhint-manager")
		if sm == nil || sm.GetLabels()["release"] != "prom" || !strings.Contains(str(sm, "spec", "endpoints"), "https-metrics") {
			t.Errorf("ServiceMonitor %v", sm)
		}
		// The alert rules of config/prometheus, copied into files/ by make
		// manifests, render as the one PrometheusRule in the release's
		// namespace.
		objs = render(t, map[string]any{"prometheusRule": map[string]any{"enable": true, "labels": map[string]any{"release": "prom"}}})
		if n := kinds(objs)["PrometheusRule"]; n != 1 {
			t.Fatalf("prometheusRule.enable rendered %d PrometheusRules, want 1 (files/prometheus/: run make manifests)", n)
		}
		var rule *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "PrometheusRule" {
				rule = o
			}
		}
		if rule.GetNamespace() != namespace || rule.GetLabels()["release"] != "prom" || !strings.Contains(str(rule, "spec", "groups"), "KVHintSidecarConfigRefused") {
			t.Errorf("PrometheusRule %s/%s labels %v: want the release's namespace, its labels and the alert rules", rule.GetNamespace(), rule.GetName(), rule.GetLabels())
		}
	})
}

// TestSchemaRefusesBadValues: values.schema.json refuses unknown keys
// and wrong types, and the error names the key.
func TestSchemaRefusesBadValues(t *testing.T) {
	c, err := Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"unknown top-level key", map[string]any{"replicas": 2}, "replicas"},
		{"unknown manager key (a typo)", map[string]any{"manager": map[string]any{"replica": 2}}, "replica"},
		{"replicas not a number", map[string]any{"manager": map[string]any{"replicas": "two"}}, "replicas"},
		{"negative replicas", map[string]any{"manager": map[string]any{"replicas": -1}}, "replicas"},
		{"a switch as a string", map[string]any{"crds": map[string]any{"enable": "yes"}}, "enable"},
		{"tolerations not a list", map[string]any{"manager": map[string]any{"tolerations": "all"}}, "tolerations"},
		{"unknown pull policy", map[string]any{"manager": map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}}, "pullPolicy"},
		{"listen on every interface", map[string]any{"injection": map[string]any{"listen": "0.0.0.0:8790"}}, "listen"},
		{"unknown injection key", map[string]any{"injection": map[string]any{"image": map[string]any{"name": "x"}}}, "name"},
		{"namespaced with no namespaces", map[string]any{"namespaced": map[string]any{"enable": true}}, "namespaces"},
		{"namespace not a DNS label", map[string]any{"namespaced": map[string]any{"enable": true, "namespaces": []any{"Routers"}}}, "namespaces"},
		{"scrape interval not a duration", map[string]any{"serviceMonitor": map[string]any{"interval": "often"}}, "interval"},
		// What would break or weaken the cluster.
		{"a privileged manager", map[string]any{"manager": map[string]any{"securityContext": map[string]any{"privileged": true, "allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}}}, "privileged"},
		{"privilege escalation", map[string]any{"manager": map[string]any{"securityContext": map[string]any{"allowPrivilegeEscalation": true, "capabilities": map[string]any{"drop": []any{"ALL"}}}}}, "allowPrivilegeEscalation"},
		{"the container securityContext taken away", map[string]any{"manager": map[string]any{"securityContext": nil}}, "securityContext"},
		{"capabilities added", map[string]any{"manager": map[string]any{"securityContext": map[string]any{"allowPrivilegeEscalation": false, "capabilities": map[string]any{"add": []any{"SYS_ADMIN"}, "drop": []any{"ALL"}}}}}, "add"},
		{"capabilities not dropped", map[string]any{"manager": map[string]any{"securityContext": map[string]any{"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"NET_RAW"}}}}}, "drop"},
		{"the container as root", map[string]any{"manager": map[string]any{"securityContext": map[string]any{"runAsUser": 0, "allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}}}, "runAsUser"},
		{"the pod as root", map[string]any{"manager": map[string]any{"podSecurityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 0}}}, "runAsUser"},
		{"the pod allowed root", map[string]any{"manager": map[string]any{"podSecurityContext": map[string]any{"runAsNonRoot": false}}}, "runAsNonRoot"},
		{"the pod securityContext taken away", map[string]any{"manager": map[string]any{"podSecurityContext": nil}}, "podSecurityContext"},
		{"seccomp unconfined", map[string]any{"manager": map[string]any{"podSecurityContext": map[string]any{"runAsNonRoot": true, "seccompProfile": map[string]any{"type": "Unconfined"}}}}, "type"},
		{"unauthenticated metrics", map[string]any{"manager": map[string]any{"args": []any{"--metrics-secure=false"}}}, "args"},
		{"metrics address overridden", map[string]any{"manager": map[string]any{"args": []any{"--metrics-bind-address=:8080"}}}, "args"},
		{"metrics on the probes' port", map[string]any{"metrics": map[string]any{"port": 8081}}, "port"},
		{"metrics on a privileged port", map[string]any{"metrics": map[string]any{"port": 443}}, "port"},
		{"a manager request that is no quantity", map[string]any{"manager": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "lots"}}}}, "cpu"},
		{"a priority class that injects fields", map[string]any{"manager": map[string]any{"priorityClassName": "x\n      hostNetwork: true\n      hostPID: true"}}, "priorityClassName"},
		{"an image tag with a newline", map[string]any{"manager": map[string]any{"image": map[string]any{"tag": "v1\nprivileged: true"}}}, "tag"},
		{"a pod label value that is no label value", map[string]any{"manager": map[string]any{"podLabels": map[string]any{"team": "a b"}}}, "team"},
		{"injected CPU request no quantity", map[string]any{"injection": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "lots"}}}}, "cpu"},
		{"injected memory limit no quantity", map[string]any{"injection": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "256 MB"}}}}, "memory"},
		{"injected listen on a port out of range", map[string]any{"injection": map[string]any{"listen": "127.0.0.1:70000"}}, "listen"},
		{"injected listen on a relative socket", map[string]any{"injection": map[string]any{"listen": "unix://run/kvhint.sock"}}, "listen"},
		{"injected socket at the root", map[string]any{"injection": map[string]any{"listen": "unix:///kvhint.sock"}}, "listen"},
		{"injected socket path not clean", map[string]any{"injection": map[string]any{"listen": "unix:///run/../kvhint.sock"}}, "listen"},
		{"injected socket mode zero", map[string]any{"injection": map[string]any{"listenMode": "0000"}}, "listenMode"},
		{"injected socket group root", map[string]any{"injection": map[string]any{"socketGroup": 0}}, "socketGroup"},
		{"injected image with a space", map[string]any{"injection": map[string]any{"image": map[string]any{"repository": "evil --x"}}}, "repository"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Values(c, tc.vals, namespace)
			if err == nil {
				t.Fatalf("accepted %v", tc.vals)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused, but the error does not name %q: %v", tc.want, err)
			}
		})
	}
	// Every key of values.yaml is in the schema: the defaults pass.
	if _, err := Values(c, nil, namespace); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestValueSetsApplyToAPIServer applies every value set's objects by
// server-side dry run to a real kube-apiserver that has the CRDs and the
// admission policies installed (and the namespaces they name): schema,
// defaulting, CEL compilation of the policies and admission all run.
// prometheus-operator's CRDs are not installed (no module of the
// proxy carries them), so a ServiceMonitor is only rendered, not applied.
func TestValueSetsApplyToAPIServer(t *testing.T) {
	c := testenv.Start(t, testenv.Options{Name: "chart", ProductCRDs: true}).Client
	ctx := context.Background()
	for _, ns := range []string{namespace, "routers", "chat"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// The policies for real (their kinds are built into kube-apiserver), so that each
	// dry run below passes through them.
	base, err := Kustomize(filepath.Join(repo, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range base {
		if strings.HasSuffix(o.GetKind(), "AdmissionPolicy") || strings.HasSuffix(o.GetKind(), "AdmissionPolicyBinding") {
			apply(t, c, o, false)
		}
	}
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs := render(t, vals)
			for _, o := range objs {
				if o.GetKind() == "Namespace" && o.GetName() == namespace {
					continue // exists
				}
				apply(t, c, o, true)
			}
			t.Logf("%d objects accepted", len(objs))
		})
	}
}

// apply server-side applies o, as a dry run or for real.
func apply(t *testing.T, c client.Client, o *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	opts := []client.PatchOption{client.FieldOwner("chart-test"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	o = o.DeepCopy()
	o.SetManagedFields(nil)
	var err error
	for i := 0; i < 50; i++ { // a new CRD's kind takes a moment to be served
		if err = c.Patch(context.Background(), o, client.Apply, opts...); err == nil || !strings.Contains(err.Error(), "no matches for kind") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("%s: %v", ident(o), err)
	}
}

// TestTemplatesQuoteStrings: every string value reaches the manifests as
// one YAML string, whatever it holds. With the schema out of the way, a
// priorityClassName that carries a line break and more fields (the
// attack the schema also refuses) renders as that one string, and the
// manager's pod gets no hostNetwork or hostPID; so do the image, the pull
// policy and the namespace list.
func TestTemplatesQuoteStrings(t *testing.T) {
	c, err := Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	c.Schema = nil
	const inject = "x\n      hostNetwork: true\n      hostPID: true"
	objs, err := Render(c, map[string]any{
		"manager": map[string]any{
			"priorityClassName": inject,
			"image":             map[string]any{"repository": "r", "tag": "t\n        securityContext: {privileged: true}", "pullPolicy": "Always\n        stdin: true"},
		},
		"namespaced": map[string]any{"enable": true, "namespaces": []any{"a\n        - --metrics-secure=false"}},
	}, namespace)
	if err != nil {
		t.Fatal(err)
	}
	var dep *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "kvhint-manager" {
			dep = o
		}
	}
	if dep == nil {
		t.Fatal("no Deployment kvhint-manager rendered")
	}
	spec, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
	for _, k := range []string{"hostNetwork", "hostPID"} {
		if _, found := spec[k]; found {
			t.Errorf("the rendered pod spec has %s: %v", k, spec[k])
		}
	}
	if got := spec["priorityClassName"]; got != inject {
		t.Errorf("priorityClassName rendered as %q, want %q", got, inject)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers rendered", len(containers))
	}
	mgr := containers[0].(map[string]any)
	for _, k := range []string{"securityContext", "stdin"} {
		if v, found := mgr[k]; found && k == "stdin" {
			t.Errorf("the rendered container has %s: %v", k, v)
		}
	}
	if sc, _, _ := unstructured.NestedBool(mgr, "securityContext", "privileged"); sc {
		t.Error("the rendered container is privileged")
	}
	args, _, _ := unstructured.NestedStringSlice(mgr, "args")
	for _, a := range args {
		if a == "--metrics-secure=false" {
			t.Errorf("a namespace rendered an argument of its own: %q", args)
		}
	}
}
