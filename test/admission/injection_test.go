package admission

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// paramsName is the injection's parameters, a ConfigMap in kvhint-system
// (config/injection).
const paramsName = "kvhint-sidecar-injection"

// installInjection installs config/injection (and the namespace and
// ServiceAccount of the manager, config/rbac) and waits until its
// validating policies act: a dry-run write of parameters without an image
// is refused.
func installInjection(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvhint-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, f := range []string{"service_account.yaml", "role.yaml", "role_binding.yaml"} {
		suite.Kubectl(t, "apply", "-f", filepath.Join(repo, "config/rbac", f))
	}
	suite.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repo, "config/injection"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := admin.CoreV1().ConfigMaps("kvhint-system").Update(ctx, params(map[string]string{"image": ""}), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "kvhint-sidecar-injection-params") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parameters' policy does not refuse parameters without an image: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// params is the parameters ConfigMap: config/injection's values with
// changes (an empty value removes the key, except image).
func params(changes map[string]string) *corev1.ConfigMap {
	data := map[string]string{
		"image": "registry.example.com/kvhint:1.0", "imagePullPolicy": "IfNotPresent", "listen": "127.0.0.1:8790",
		"cpuRequest": "250m", "memoryRequest": "64Mi", "memoryLimit": "256Mi",
	}
	for k, v := range changes {
		if v == "" && k != "image" {
			delete(data, k)
			continue
		}
		data[k] = v
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: paramsName, Namespace: "kvhint-system"}, Data: data}
}

// TestInjectionParams: the injection's parameters are checked when they
// are written. Without the check, a quantity that is not one gives every
// opted-in pod an HTTP 500, and a listen address the sidecar refuses is
// injected and crash-loops. Each mistake is refused with a message that
// names the key; the parameters of config/injection, and a Unix socket
// set up right, are taken.
func TestInjectionParams(t *testing.T) {
	requireEnv(t)
	installInjection(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		changes map[string]string
		says    string // in the refusal; "" when taken
	}{
		{"config/injection's own", nil, ""},
		{"a Unix socket", map[string]string{"listen": "unix:///run/kvhint/booking.sock", "listenMode": "0660", "socketGroup": "2000"}, ""},
		{"IPv6 loopback, a CPU limit", map[string]string{"listen": "[::1]:8790", "cpuLimit": "1"}, ""},
		{"no resources at all", map[string]string{"cpuRequest": "", "memoryRequest": "", "memoryLimit": ""}, ""},
		{"a CPU request that is no quantity", map[string]string{"cpuRequest": "lots"}, "cpuRequest lots is not a Kubernetes quantity"},
		{"a memory limit that is no quantity", map[string]string{"memoryLimit": "256 MB"}, "memoryLimit 256 MB is not a Kubernetes quantity"},
		{"a request over its limit", map[string]string{"memoryRequest": "512Mi"}, "a request is over its limit"},
		{"listen on every address", map[string]string{"listen": "0.0.0.0:8790"}, "listen 0.0.0.0:8790 is not what kvhint sidecar --listen takes"},
		{"listen on a host name", map[string]string{"listen": "localhost:8790"}, "listen localhost:8790 is not"},
		{"listen on a port out of range", map[string]string{"listen": "127.0.0.1:70000"}, "listen 127.0.0.1:70000 is not"},
		{"listen without a port", map[string]string{"listen": "127.0.0.1"}, "listen 127.0.0.1 is not"},
		{"a relative socket path", map[string]string{"listen": "unix://run/kvhint/booking.sock"}, "listen unix://run/kvhint/booking.sock is not"},
		{"a socket at the root", map[string]string{"listen": "unix:///booking.sock"}, "in a folder of its own"},
		{"a socket path that is not clean", map[string]string{"listen": "unix:///run/../etc/booking.sock"}, "an absolute clean path"},
		{"a socket path too long", map[string]string{"listen": "unix:///run/" + strings.Repeat("x", 100) + ".sock"}, "at most 107 bytes"},
		{"a socket mode that is not octal", map[string]string{"listen": "unix:///run/kvhint/booking.sock", "listenMode": "0999"}, "listenMode 0999 is not an octal mode"},
		{"a socket mode with TCP", map[string]string{"listenMode": "0660"}, "listenMode 0660 sets the mode of a Unix socket, but listen is TCP"},
		{"a socket group that is a name", map[string]string{"listen": "unix:///run/kvhint/booking.sock", "socketGroup": "routers"}, "socketGroup routers is not a group ID"},
		{"no image", map[string]string{"image": ""}, "image is required"},
		{"an image with a space", map[string]string{"image": "kvhint:1 --evil"}, "image is required, one image reference without spaces"},
		{"a pull policy that is none", map[string]string{"imagePullPolicy": "Sometimes"}, "imagePullPolicy Sometimes is not Always, IfNotPresent or Never"},
		{"a key misspelt", map[string]string{"cpuRequests": "1"}, "unknown key(s) cpuRequests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := admin.CoreV1().ConfigMaps("kvhint-system").Update(ctx, params(tc.changes), metav1.UpdateOptions{})
			requireVerdict(t, "kvhint-sidecar-injection-params", err, tc.says == "", tc.says)
		})
	}
	// The last good parameters are still there.
	got, err := admin.CoreV1().ConfigMaps("kvhint-system").Get(ctx, paramsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["cpuRequest"] == "lots" || got.Data["listen"] != "127.0.0.1:8790" {
		t.Errorf("refused parameters were written: %v", got.Data)
	}
}

// TestManagerCannotWriteInjectionParams: the manager's ClusterRole writes
// ConfigMaps in every namespace (its config revisions), so with its token
// alone one could change the image of every sidecar injected in the
// cluster. With config/injection, the manager's identity (a token bound
// to the manager's pod) may not apply, patch, delete or re-create the
// parameters, while it still writes its own ConfigMaps.
func TestManagerCannotWriteInjectionParams(t *testing.T) {
	requireEnv(t)
	installInjection(t)
	ctx := context.Background()
	managerPod, err := admin.CoreV1().Pods("kvhint-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kvhint-manager-params-"},
		Spec: corev1.PodSpec{ServiceAccountName: "kvhint-manager", AutomountServiceAccountToken: ptrTo(false),
			Containers: []corev1.Container{{Name: "manager", Image: "kvhint:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manager := tokenFor(t, "kvhint-system", "kvhint-manager", managerPod)
	cms := manager.CoreV1().ConfigMaps("kvhint-system")
	evil := params(map[string]string{"image": "evil.example.com/kvhint:1"})

	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"applies the parameters (server-side, as it writes its own)", func() error {
			_, err := cms.Apply(ctx, corev1ac.ConfigMap(paramsName, "kvhint-system").WithData(evil.Data), metav1.ApplyOptions{FieldManager: v1alpha1.RolloutFieldManager, Force: true})
			return err
		}},
		{"patches the image", func() error {
			_, err := cms.Patch(ctx, paramsName, "application/merge-patch+json", []byte(`{"data":{"image":"evil.example.com/kvhint:1"}}`), metav1.PatchOptions{})
			return err
		}},
		{"deletes the parameters", func() error { return cms.Delete(ctx, paramsName, metav1.DeleteOptions{}) }},
	} {
		t.Run("manager "+tc.name, func(t *testing.T) {
			requireVerdict(t, "kvhint-sidecar-injection-params", tc.write(), false, "kvhint manager may not")
		})
	}
	t.Run("manager re-creates them", func(t *testing.T) {
		if err := admin.CoreV1().ConfigMaps("kvhint-system").Delete(ctx, paramsName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		defer suite.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repo, "config/injection"))
		_, err := cms.Create(ctx, evil, metav1.CreateOptions{})
		requireVerdict(t, "kvhint-sidecar-injection-params", err, false, "kvhint manager may not")
	})
	t.Run("manager writes a config revision", func(t *testing.T) {
		rev := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "llama-hints-0123456789abcdef", Namespace: "kvhint-system"}, Data: map[string]string{"hints.yaml": "x"}}
		if _, err := cms.Create(ctx, rev, metav1.CreateOptions{}); err != nil {
			t.Errorf("the manager creating its own ConfigMap: %v", err)
		}
	})
}

// TestInjectionRefusesRouterLabelsThatAreNoRouter: an opted-in pod whose
// router label is a label value but no router name (no RouterRole can
// name it) would get a sidecar that waits forever for its config, with no
// error. It is refused with the reason; a router name is injected.
func TestInjectionRefusesRouterLabelsThatAreNoRouter(t *testing.T) {
	requireEnv(t)
	installInjection(t)
	ctx := context.Background()
	const ns = "injected"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testenv.MustCreateFile(t, suite.Client, ns, filepath.Join(repo, "config/router/rbac.yaml"))
	for _, tc := range []struct {
		router string
		says   string
	}{
		{"llama", ""},
		{"llama-v2", ""},
		{"Llama_X", "hints.kvrouter.io/router=Llama_X is not a router name"},
		{"llama.v2", "hints.kvrouter.io/router=llama.v2 is not a router name"},
		{"LLAMA", "hints.kvrouter.io/router=LLAMA is not a router name"},
		{strings.Repeat("l", 63), ""},
	} {
		t.Run(tc.router, func(t *testing.T) {
			p := pod("", map[string]string{v1alpha1.RouterLabel: tc.router, "hints.kvrouter.io/inject": "true"}, nil)
			p.GenerateName = "router-"
			got, err := createDryRun(admin, ns, p)
			requireVerdict(t, "kvhint-sidecar-injection-router", err, tc.says == "", tc.says)
			if err == nil && (len(got.Spec.InitContainers) == 0 || got.Spec.InitContainers[0].Name != "kvhint") {
				t.Errorf("router %q: no sidecar injected: %v", tc.router, got.Spec.InitContainers)
			}
		})
	}
}

func createDryRun(c kubernetes.Interface, ns string, p *corev1.Pod) (*corev1.Pod, error) {
	return c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}
