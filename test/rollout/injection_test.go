package rollout

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// injectLabel is the injection opt-in (config/injection).
const injectLabel = "hints.kvrouter.io/inject"

// sidecarImage is the image the test's injection parameters name.
const sidecarImage = "registry.example.com/kvhint:test"

// installInjection installs config/admission and config/injection as
// config/default does (the parameters with sidecarImage), and waits until
// the injection policy acts: a server-side dry run of an opted-in pod
// comes back with the sidecar.
func installInjection(t *testing.T) {
	t.Helper()
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvhint-system"}}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	testenv.Get(t).Kubectl(t, "apply", "--server-side", "-k", filepath.Join("..", "..", "config", "admission"))
	// A second test installs it again over the image the first patched
	// in: the install takes the field back, as an upgrade would.
	testenv.Get(t).Kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join("..", "..", "config", "injection"))
	testenv.Get(t).Kubectl(t, "-n", "kvhint-system", "patch", "configmap", "kvhint-sidecar-injection", "--type=merge",
		"-p", `{"data":{"image":"`+sidecarImage+`"}}`)

	ns := newCatalogNamespace(t)
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{v1alpha1.RouterLabel: "llama", injectLabel: "true"}},
		// The ServiceAccount admission plugin, which envtest's API server
		// runs without, would set it; the sidecar's projected token needs it.
		Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "router", Image: "router:1"}}},
	}
	testenv.Eventually(t, timeout, "the injection policy to act", func(ctx context.Context) error {
		p := probe.DeepCopy()
		if err := k8s.Create(ctx, p, client.DryRunAll); err != nil {
			return err
		}
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Image != sidecarImage {
			return fmt.Errorf("a dry-run pod has init containers %v", p.Spec.InitContainers)
		}
		return nil
	})
}

// injectedRouter is config/router's Deployment, as a user writes it (two
// labels, no sidecar), with replicas and the opt-in given; its pods run on
// kwok's node.
func injectedRouter(t *testing.T, ns, name string, replicas int32, optIn bool) *appsv1.Deployment {
	t.Helper()
	dep := &appsv1.Deployment{}
	readYAML(t, filepath.Join("..", "..", "config", "router", "deployment.yaml"), dep)
	dep.Namespace, dep.Name = ns, name
	sel := map[string]string{"app.kubernetes.io/name": name}
	dep.Spec.Selector.MatchLabels = sel
	dep.Spec.Template.Labels["app.kubernetes.io/name"] = name
	if !optIn {
		// A router pod of another router (so that llama's Programmed
		// counts only the injected pods), without the opt-in.
		delete(dep.Spec.Template.Labels, injectLabel)
		dep.Spec.Template.Labels[v1alpha1.RouterLabel] = "plain"
	} else if dep.Spec.Template.Labels[injectLabel] != "true" || dep.Spec.Template.Labels[v1alpha1.RouterLabel] != "llama" {
		t.Fatalf("config/router's pod template lacks the labels %s=llama and %s=true: %v", v1alpha1.RouterLabel, injectLabel, dep.Spec.Template.Labels)
	}
	if len(dep.Spec.Template.Spec.InitContainers) != 0 {
		t.Fatalf("config/router's pod template writes init containers itself: %v", dep.Spec.Template.Spec.InitContainers)
	}
	dep.Spec.Replicas = &replicas
	dep.Spec.Template.Spec.NodeName = node
	return dep
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// manualSidecar is the sidecar container and token volume that
// config/router-manual writes by hand, as the API server defaults them
// (a server-side dry run of that Deployment), with the image the
// injection's parameters name.
func manualSidecar(t *testing.T, ns string) (corev1.Container, corev1.Volume) {
	t.Helper()
	out := testenv.Get(t).Kubectl(t, "kustomize", filepath.Join("..", "..", "config", "router-manual"))
	var dep *appsv1.Deployment
	for _, doc := range strings.Split(out, "\n---\n") {
		d := &appsv1.Deployment{}
		if err := yaml.Unmarshal([]byte(doc), d); err == nil && d.Kind == "Deployment" {
			dep = d
		}
	}
	if dep == nil {
		t.Fatalf("config/router-manual has no Deployment:\n%s", out)
	}
	dep.Namespace, dep.Name = ns, "manual-dry-run"
	if err := k8s.Create(context.Background(), dep, client.DryRunAll); err != nil {
		t.Fatalf("dry run of config/router-manual's Deployment: %v", err)
	}
	spec := dep.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || len(spec.Volumes) != 1 {
		t.Fatalf("config/router-manual: init containers %d, volumes %d; want 1 and 1", len(spec.InitContainers), len(spec.Volumes))
	}
	c := spec.InitContainers[0]
	c.Image = sidecarImage
	return c, spec.Volumes[0]
}

func routerPods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": app}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// waitReadyPods waits until the Deployment's app has n live pods, all
// Running and Ready, and returns them.
func waitReadyPods(t *testing.T, ns, app string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	testenv.Eventually(t, timeout, fmt.Sprintf("%d Ready pods of %s", n, app), func(context.Context) error {
		pods = routerPods(t, ns, app)
		if len(pods) != n {
			return fmt.Errorf("%d live pods", len(pods))
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || !ready(&p) {
				return fmt.Errorf("pod %s: %s, ready %v", p.Name, p.Status.Phase, ready(&p))
			}
		}
		return nil
	})
	return pods
}

func countNamed(cs []corev1.Container, name string) int {
	n := 0
	for _, c := range cs {
		if c.Name == name {
			n++
		}
	}
	return n
}

// TestInjectedSidecar: with config/injection installed, config/router's
// Deployment (labels, no sidecar) gets pods whose first init container is
// the kvhint native sidecar, field for field the one config/router-manual
// writes by hand, and the pods become Ready (kwok). A Deployment without
// the opt-in gets no sidecar; a pod that has one already is left as it
// is; a re-created pod gets exactly one. kwok runs no containers, so the
// real kvhint binary is then run by hand with the injected container's
// args and env (the downward API resolved from the pod, a token of the
// pod's ServiceAccount bound to the pod, as the projected volume gives it;
// POD_IP is a loopback address, since nothing here may listen elsewhere):
// it loads the router's config, answers the injected readiness probe, and
// reports applied-hash on the pod, and the RouterRole reads Programmed.
func TestInjectedSidecar(t *testing.T) {
	requireEnv(t)
	installInjection(t)
	ctx := context.Background()
	ns := newCatalogNamespace(t)
	// config/router's RBAC: the sidecar's ServiceAccount, Role and binding.
	testenv.Get(t).Kubectl(t, "apply", "--server-side", "-n", ns, "-f", filepath.Join("..", "..", "config", "router", "rbac.yaml"))
	wantSidecar, wantVolume := manualSidecar(t, ns)

	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	injected := injectedRouter(t, ns, "llama-router", 1, true)
	plain := injectedRouter(t, ns, "llama-plain", 1, false)
	testenv.Create(t, k8s, rr, injected, plain)

	pods := waitReadyPods(t, ns, "llama-router", 1)
	pod := pods[0]
	spec := pod.Spec
	if len(spec.InitContainers) != 1 || countNamed(spec.Containers, "kvhint") != 0 {
		t.Fatalf("pod %s: init containers %d, containers %v; want the one sidecar", pod.Name, len(spec.InitContainers), spec.Containers)
	}
	if diff := cmp.Diff(wantSidecar, spec.InitContainers[0]); diff != "" {
		t.Errorf("the injected sidecar differs from config/router-manual's (-manual +injected):\n%s", diff)
	}
	var token *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == wantVolume.Name {
			token = &spec.Volumes[i]
		}
	}
	if token == nil {
		t.Fatalf("pod %s has no volume %s: %v", pod.Name, wantVolume.Name, spec.Volumes)
	}
	if diff := cmp.Diff(wantVolume, *token); diff != "" {
		t.Errorf("the injected token volume differs from config/router-manual's (-manual +injected):\n%s", diff)
	}
	if len(spec.Containers) != 1 || len(spec.Containers[0].VolumeMounts) != 0 {
		t.Errorf("the router container was changed: %+v", spec.Containers)
	}
	// The args in the words, whatever the manual says.
	if want := []string{"sidecar", "--router=llama", "--listen=127.0.0.1:8790"}; !slices.Equal(spec.InitContainers[0].Args, want) {
		t.Errorf("sidecar args %q, want %q", spec.InitContainers[0].Args, want)
	}
	if p := spec.InitContainers[0].RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways {
		t.Errorf("sidecar restartPolicy %v, want Always", p)
	}

	t.Run("no opt-in, no sidecar", func(t *testing.T) {
		for _, p := range waitReadyPods(t, ns, "llama-plain", 1) {
			if len(p.Spec.InitContainers) != 0 || len(p.Spec.Volumes) != 0 {
				t.Errorf("pod %s without the opt-in was changed: init containers %v, volumes %v", p.Name, p.Spec.InitContainers, p.Spec.Volumes)
			}
		}
	})

	t.Run("a pod with the sidecar already is left as it is", func(t *testing.T) {
		own := wantSidecar.DeepCopy()
		own.Args = []string{"sidecar", "--router=llama", "--listen=127.0.0.1:18790"}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hand-written", Labels: map[string]string{v1alpha1.RouterLabel: "llama", injectLabel: "true"}},
			Spec: corev1.PodSpec{
				ServiceAccountName:           "kvhint-sidecar-llama",
				AutomountServiceAccountToken: ptrTo(false),
				InitContainers:               []corev1.Container{*own},
				Containers:                   []corev1.Container{{Name: "router", Image: "router:1"}},
				Volumes:                      []corev1.Volume{wantVolume},
			},
		}
		dry := p.DeepCopy()
		if err := k8s.Create(ctx, dry, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if len(dry.Spec.InitContainers) != 1 || !slices.Equal(dry.Spec.InitContainers[0].Args, own.Args) || len(dry.Spec.Volumes) != 1 {
			t.Errorf("a pod with its own sidecar was changed: init containers %+v, volumes %+v", dry.Spec.InitContainers, dry.Spec.Volumes)
		}
	})

	t.Run("a re-created pod gets one sidecar", func(t *testing.T) {
		old := routerPods(t, ns, "llama-router")[0]
		if err := k8s.Delete(ctx, &old); err != nil {
			t.Fatal(err)
		}
		var fresh corev1.Pod
		testenv.Eventually(t, timeout, "a new pod", func(context.Context) error {
			for _, p := range routerPods(t, ns, "llama-router") {
				if p.UID != old.UID {
					fresh = p
					return nil
				}
			}
			return fmt.Errorf("no new pod yet")
		})
		if n := countNamed(fresh.Spec.InitContainers, "kvhint"); n != 1 || len(fresh.Spec.InitContainers) != 1 {
			t.Errorf("pod %s has %d kvhint sidecars among %d init containers; want 1", fresh.Name, n, len(fresh.Spec.InitContainers))
		}
		n := 0
		for _, v := range fresh.Spec.Volumes {
			if v.Name == wantVolume.Name {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pod %s has %d token volumes, want 1", fresh.Name, n)
		}
	})

	// The injected sidecar, run for real against the pod it was injected
	// into.
	pod = waitReadyPods(t, ns, "llama-router", 1)[0]
	sc := pod.Spec.InitContainers[0]
	podIP := "127.25.0.1" // loopback: this test listens nowhere else
	env, err := testenv.ContainerEnv(&pod, &sc, podIP)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigFile := boundKubeconfig(t, &pod)
	bin := buildKvhint(t)
	cmd := exec.Command(bin, sc.Args...)
	cmd.Env = append(env, "KUBECONFIG="+kubeconfigFile, "HOME="+t.TempDir(), "PATH="+os.Getenv("PATH"))
	logf, err := os.Create(filepath.Join(t.TempDir(), "sidecar.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("sidecar log:\n%s", controlplane.Tail(logf.Name()))
		}
	}()

	// The readiness probe, as the kubelet would send it: its path on the
	// named port of the injected container, at the pod's IP.
	probe := sc.ReadinessProbe.HTTPGet
	port := 0
	for _, p := range sc.Ports {
		if p.Name == probe.Port.String() {
			port = int(p.ContainerPort)
		}
	}
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(port)) + probe.Path
	testenv.Eventually(t, timeout, "the sidecar's readiness probe "+url, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
	c := waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "1/1 router pods run ", 0)
	hash := hashOf(t, rr)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(&pod), &pod); err != nil {
		t.Fatal(err)
	}
	if got := pod.Annotations[v1alpha1.AppliedHashAnnotation]; got != hash {
		t.Errorf("pod %s reports applied-hash %q, want %q", pod.Name, got, hash)
	}
	t.Logf("Programmed: %s", c.Message)
}

// boundKubeconfig writes a kubeconfig with a token of the pod's
// ServiceAccount bound to the pod: what the injected projected volume
// mounts in the sidecar.
func boundKubeconfig(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteBoundKubeconfig(context.Background(), cs, restCfg, pod, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// buildKvhint builds the product binary into a temp folder.
func buildKvhint(t *testing.T) string {
	t.Helper()
	bins, err := testenv.Build(t.TempDir(), "kvhint")
	if err != nil {
		t.Fatal(err)
	}
	return bins[0]
}

// TestInjectionKeepsThePodsOwn: an opted-in pod as a real router's is
// admitted on a cluster, with the ServiceAccount plugin on: its
// ServiceAccount automounts a token, so the plugin adds a
// kube-api-access-* volume and mounts it in every container before the
// injection policy runs, and the pod has volumes of its own (an emptyDir
// at /dev/shm, a ConfigMap) and an init container. The policy must add
// its sidecar and token volume beside them and leave the pod's own
// volumes, init containers and containers exactly as the API server
// admits the same pod without the opt-in; its ReplicaSet must create the
// pod.
func TestInjectionKeepsThePodsOwn(t *testing.T) {
	requireEnv(t)
	installInjection(t)
	ctx := context.Background()
	ns := newCatalogNamespace(t)
	testenv.Get(t).Kubectl(t, "apply", "--server-side", "-n", ns, "-f", filepath.Join("..", "..", "config", "router", "rbac.yaml"))
	wantSidecar, wantVolume := manualSidecar(t, ns)

	dep := injectedRouter(t, ns, "own-router", 1, true)
	spec := &dep.Spec.Template.Spec
	// A token for every container, as a pod whose ServiceAccount automounts
	// one (the default) gets (config/router's ServiceAccount does not).
	spec.AutomountServiceAccountToken = ptrTo(true)
	spec.Volumes = []corev1.Volume{
		{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "models", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "models"}}}},
	}
	spec.InitContainers = []corev1.Container{{
		Name: "fetch-models", Image: "busybox:1", Command: []string{"sh", "-c", "true"},
		VolumeMounts: []corev1.VolumeMount{{Name: "models", MountPath: "/models"}},
	}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}, {Name: "models", MountPath: "/models"}}

	// The pod as the API server admits it without the opt-in: what the
	// injected pod must keep.
	asPod := func(optIn bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: *dep.Spec.Template.ObjectMeta.DeepCopy(), Spec: *spec.DeepCopy()}
		p.Namespace, p.GenerateName = ns, "own-router-"
		if !optIn {
			delete(p.Labels, injectLabel)
		}
		return p
	}
	plain := asPod(false)
	if err := k8s.Create(ctx, plain, client.DryRunAll); err != nil {
		t.Fatalf("dry run of the pod without the opt-in: %v", err)
	}
	if !slices.ContainsFunc(plain.Spec.Volumes, func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "kube-api-access-") }) {
		t.Fatalf("the API server added no kube-api-access-* volume (is the ServiceAccount plugin on?): %v", plain.Spec.Volumes)
	}
	check := func(t *testing.T, got *corev1.Pod) {
		t.Helper()
		s := got.Spec
		if len(s.InitContainers) == 0 || s.InitContainers[0].Name != "kvhint" {
			t.Fatalf("pod %s: the first init container is not the sidecar: %v", got.Name, s.InitContainers)
		}
		if diff := cmp.Diff(wantSidecar, s.InitContainers[0]); diff != "" {
			t.Errorf("the injected sidecar differs from config/router-manual's (-manual +injected):\n%s", diff)
		}
		want := plain.Spec
		gotVolumes := slices.DeleteFunc(slices.Clone(s.Volumes), func(v corev1.Volume) bool { return v.Name == wantVolume.Name })
		if len(gotVolumes) != len(s.Volumes)-1 {
			t.Errorf("pod %s: %d volumes named %s, want 1", got.Name, len(s.Volumes)-len(gotVolumes), wantVolume.Name)
		}
		for _, d := range []struct {
			what      string
			want, got any
		}{
			{"volumes", want.Volumes, gotVolumes},
			{"init containers", want.InitContainers, s.InitContainers[1:]},
			{"containers", want.Containers, s.Containers},
		} {
			if diff := cmp.Diff(d.want, d.got, sameTokenVolume); diff != "" {
				t.Errorf("pod %s: the pod's own %s changed (-without opt-in +injected):\n%s", got.Name, d.what, diff)
			}
		}
	}

	// A dry run first: its refusal is the API server's own message.
	dry := asPod(true)
	if err := k8s.Create(ctx, dry, client.DryRunAll); err != nil {
		t.Fatalf("an opted-in pod with volumes and an init container is refused: %v", err)
	}
	check(t, dry)

	// The same through a ReplicaSet, as a router's pods are made.
	testenv.Create(t, k8s, dep)
	pod := waitReadyPods(t, ns, "own-router", 1)[0]
	check(t, &pod)
}

// sameTokenVolume compares the ServiceAccount plugin's kube-api-access-*
// names as equal: the suffix is random per pod.
var sameTokenVolume = cmp.Transformer("tokenVolumeName", func(name string) string {
	if strings.HasPrefix(name, "kube-api-access-") {
		return "kube-api-access-*"
	}
	return name
})
