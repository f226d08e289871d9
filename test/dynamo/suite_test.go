package dynamo_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kvrouter/kv-hint-operator/test/dynamo"
)

// One kube-apiserver and etcd with the DynamoGraphDeployment CRD, and one
// manager running the stand-in; each test works in a namespace of its own.
// No kube-controller-manager runs: the tests write a Deployment's status
// themselves where they need one.
var k8s client.Client // uncached: what the API server holds now

// timeout bounds every wait on the stand-in.
const timeout = 30 * time.Second

// noAPIServer says why the tests skip; empty when the suite started the
// control plane.
var noAPIServer string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		noAPIServer = "KUBEBUILDER_ASSETS is not set; run KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh) go test ./test/dynamo/"
		return m.Run()
	}
	logOut := io.Discard
	if testing.Verbose() {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logOut)))

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{dynamo.CRDPath("../..")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dynamo: starting kube-apiserver and etcd:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dynamo: stopping the control plane:", err)
		}
	}()
	if k8s, err = client.New(cfg, client.Options{Scheme: dynamo.NewScheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop, err := dynamo.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dynamo: starting the stand-in:", err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dynamo: the stand-in stopped with:", err)
		}
	}()
	return m.Run()
}

// newNamespace skips without an API server, and otherwise creates a
// namespace for the test and deletes it after.
func newNamespace(t *testing.T) string {
	t.Helper()
	if noAPIServer != "" {
		t.Skip(noAPIServer)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dynamo-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// eventually polls cond until it returns true, fails the test on an error
// or after timeout, and says what it waited for.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: timed out after %s (last error: %v)", what, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
