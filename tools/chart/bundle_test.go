package chart

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

func readObjs(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func imageOf(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "kvhint-manager" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			return cs[0].(map[string]any)["image"].(string)
		}
	}
	t.Fatal("no manager Deployment")
	return ""
}

// TestReleaseBundleInstalls applies install.yaml to an empty
// kube-apiserver twice with kubectl's server-side apply: the first
// creates everything, the second conflicts with nothing and changes
// nothing (every object keeps its resourceVersion). Then the manager runs
// from the bundle: the real kvhint binary with the bundle Deployment's
// args (its listen addresses moved to loopback ports of this machine) and
// the bundle's ServiceAccount, RBAC and admission policies (a token of
// kvhint-system/kvhint-manager), and reconciles a sample: the RouterRoles
// of config/samples/disaggregated.yaml are Accepted and their compiled
// ConfigMap is written.
func TestReleaseBundleInstalls(t *testing.T) {
	testenv.RequireAssets(t)
	b := snapshot(t)
	// An empty API server: install.yaml brings the CRDs.
	env := testenv.Start(t, testenv.Options{Name: "bundle"})
	cfg, c := env.Config, env.Client
	kubectl := func(args ...string) string {
		t.Helper()
		return env.Kubectl(t, args...)
	}
	ctx := context.Background()
	install := readObjs(t, b.Install)
	versions := func() map[string]string {
		m := map[string]string{}
		for _, o := range install {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(o.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), u); err != nil {
				t.Fatalf("%s: %v", ident(o), err)
			}
			m[ident(o)] = u.GetResourceVersion()
		}
		return m
	}

	// A CRD's kinds are served a moment after it is created; kubectl
	// fails the objects of a kind not served yet, so the first apply may
	// need a second pass, as `kubectl apply` in CI would.
	var first string
	for i := 0; ; i++ {
		out, err := env.RunKubectl("apply", "--server-side", "-f", b.Install)
		if err == nil {
			first = out
			break
		}
		if i == 5 {
			t.Fatalf("kubectl apply --server-side -f install.yaml: %v\n%s", err, out)
		}
		time.Sleep(time.Second)
	}
	before := versions()
	second := kubectl("apply", "--server-side", "-f", b.Install)
	after := versions()
	changed := 0
	for k, v := range before {
		if after[k] != v {
			changed++
			t.Errorf("%s changed on the second apply (resourceVersion %s -> %s)", k, v, after[k])
		}
	}
	if strings.Contains(second, "conflict") {
		t.Errorf("second apply reports a conflict:\n%s", second)
	}
	t.Logf("first apply:\n%s\nsecond apply: %d objects, %d changed", first, len(before), changed)

	// The manager from the bundle.
	var dep *unstructured.Unstructured
	for _, o := range install {
		if o.GetKind() == "Deployment" && o.GetName() == "kvhint-manager" {
			dep = o
		}
	}
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	var args []string
	for _, a := range cs[0].(map[string]any)["args"].([]any) {
		s := a.(string)
		// The Deployment binds every interface of its pod; here the
		// manager listens on loopback only.
		switch {
		case strings.HasPrefix(s, "--health-probe-bind-address="):
			s = "--health-probe-bind-address=127.0.0.1:" + freePort(t)
		case strings.HasPrefix(s, "--metrics-bind-address="):
			s = "--metrics-bind-address=127.0.0.1:" + freePort(t)
		}
		args = append(args, s)
	}
	if args[0] != "manager" {
		t.Fatalf("the bundle's manager args %q", args)
	}
	cset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := cset.CoreV1().ServiceAccounts("kvhint-system").CreateToken(ctx, "kvhint-manager",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managerKubeconfig := writeKubeconfig(t, cfg.Host, cfg.CAData, tr.Status.Token)
	bin := hostKVHint(t, b) // the release's own kvhint
	logPath := filepath.Join(t.TempDir(), "manager.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	mgr := exec.Command(bin, append(args, "--kubeconfig", managerKubeconfig, "--leader-election-namespace", "kvhint-system")...)
	mgr.Stdout, mgr.Stderr = logf, logf
	if err := mgr.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = mgr.Process.Kill()
		_ = mgr.Wait()
		if t.Failed() {
			t.Logf("manager log:\n%s", tailFile(logPath, 30))
		}
	}()
	t.Logf("kvhint %s", strings.Join(args, " "))

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "routers"}}); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-n", "routers", "-f", filepath.Join(repo, "config", "samples", "disaggregated.yaml"))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var last string
		cm := &corev1.ConfigMap{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "routers", Name: "llama-hints"}, cm)
		if err == nil {
			out := kubectl("-n", "routers", "get", "routerroles", "-o",
				`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Accepted")].status} {end}`)
			if strings.Contains(out, "llama-prefill=True") && strings.Contains(out, "llama-decode=True") && cm.Data["hints.yaml"] != "" {
				t.Logf("reconciled: %s; llama-hints hints.yaml:\n%s", out, cm.Data["hints.yaml"])
				return
			}
			last = out
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bundle's manager did not reconcile the sample within 2m: %s", last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// writeKubeconfig writes a kubeconfig that reaches host as the bearer of
// token.
func writeKubeconfig(t *testing.T, host string, ca []byte, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
