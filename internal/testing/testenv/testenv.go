// Package testenv is the harness of every test suite that needs a real
// kube-apiserver and etcd. It starts them through internal/dev/controlplane,
// the control plane `kvhint-dev dev` runs, so the suites and the dev
// environment admit, install and roll out alike.
//
// A suite's TestMain calls Run once with the Options it needs (the
// ServiceAccount admission plugin on as clusters run it,
// kube-controller-manager and kwok, the product's CRDs, Dynamo's
// DynamoGraphDeployment CRD, a setup that starts the manager); its tests
// call Get for the running Env. A test that needs a control plane of its
// own calls Start. Beside them: Eventually, the one poll of the tests;
// NewNamespace; WaitCondition; and builders of the objects the suites
// create (builders.go).
//
// Without KUBEBUILDER_ASSETS the tests that need an API server skip, here
// and only here, with how to get the binaries (so that `make unit` and a
// bare `go test ./...` pass); with it set to a folder that lacks them,
// they fail with the same words.
//
// Only tests import this package. It imports the API types, the
// product's CRDs, test/dynamo and internal/dev/controlplane.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dev/controlplane"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
)

// AssetsVar names the environment variable that holds the folder of
// kube-apiserver, etcd and the other binaries.
const AssetsVar = "KUBEBUILDER_ASSETS"

// Options shape a suite's control plane.
type Options struct {
	// Name names the suite in messages and its temporary folder.
	Name string
	// ProductCRDs installs the CRDs of config/crd.
	ProductCRDs bool
	// DynamoCRD installs test/dynamo's DynamoGraphDeployment CRD at start
	// and adds its types to the Client's scheme. A suite that installs it
	// later (as a cluster where Dynamo comes after kvhint does) calls
	// Env.InstallDynamoCRD.
	DynamoCRD bool
	// CRDs are more CRDs to install at start (another operator's, say).
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// AdmitAsClusters turns the ServiceAccount admission plugin on, as
	// every cluster runs it (controlplane.Options.AdmitAsClusters).
	AdmitAsClusters bool
	// KubeControllerManager runs kube-controller-manager, so that
	// Deployments roll out.
	KubeControllerManager bool
	// Kwok runs kwok and its fake node controlplane.FakeNode, so that the
	// pods on it become Running and Ready.
	Kwok bool
	// Lazy starts the control plane at the first Get rather than in Run,
	// for a package whose tests mostly need none.
	Lazy bool
	// Scheme is the Client's; nil: client-go's types, the API's and, with
	// DynamoCRD, Dynamo's.
	Scheme *runtime.Scheme
	// Setup runs once the control plane is up, before the tests: it
	// starts what the suite runs against it (the manager, a stand-in) and
	// returns how to stop it. Its error fails the suite.
	Setup func(*Env) (stop func(), err error)
}

// Env is a running control plane and what a test needs to reach it.
type Env struct {
	*controlplane.ControlPlane
	// Client is uncached and acts as the cluster admin.
	Client client.Client
	// Kube is client-go's typed client, as the cluster admin.
	Kube kubernetes.Interface
	// Dir holds the kubeconfig and the logs; it is removed after the suite.
	Dir string
	// Repo is the module root, for config/ and test/ files.
	Repo string
	// Scheme is the Client's scheme.
	Scheme *runtime.Scheme
}

// The suite's environment: Run sets opts and, unless Lazy, starts it.
var (
	suite struct {
		sync.Mutex
		opts    *Options
		started bool
		env     *Env
		skip    string
		err     error
		stop    func()
	}
)

// Run is a suite's TestMain: it starts the control plane as o says (or
// leaves that to the first Get with Lazy), runs the tests and stops it.
// Use it as os.Exit(testenv.Run(m, testenv.Options{...})).
func Run(m *testing.M, o Options) int {
	setLogger()
	suite.Lock()
	suite.opts = &o
	suite.Unlock()
	if !o.Lazy {
		if _, skip, err := startSuite(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", o.Name, err)
			return 1
		} else if skip != "" {
			fmt.Fprintf(os.Stderr, "%s: the tests that need kube-apiserver skip: %s\n", o.Name, skip)
		}
	}
	code := m.Run()
	suite.Lock()
	stop := suite.stop
	suite.Unlock()
	if stop != nil {
		stop()
	}
	return code
}

// Get returns the suite's environment, starting it if Options.Lazy. It
// skips t without KUBEBUILDER_ASSETS and fails it when the control plane
// did not start.
func Get(t testing.TB) *Env {
	t.Helper()
	env, skip, err := startSuite()
	switch {
	case skip != "":
		t.Skip(skip)
	case err != nil:
		t.Fatalf("the suite's control plane: %v", err)
	}
	return env
}

func startSuite() (*Env, string, error) {
	suite.Lock()
	defer suite.Unlock()
	if suite.opts == nil {
		return nil, "", errors.New("testenv.Get without testenv.Run: call it from the package's TestMain")
	}
	if !suite.started {
		suite.started = true
		assets, skip, err := Assets()
		if skip != "" || err != nil {
			suite.skip, suite.err = skip, err
		} else {
			suite.env, suite.stop, suite.err = start(*suite.opts, assets)
		}
	}
	return suite.env, suite.skip, suite.err
}

// Start starts a control plane for t alone, stopped when t ends; it skips
// t without KUBEBUILDER_ASSETS. Options.Lazy does not apply.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	setLogger()
	assets, skip, err := Assets()
	switch {
	case skip != "":
		t.Skip(skip)
	case err != nil:
		t.Fatal(err)
	}
	env, stop, err := start(o, assets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return env
}

// Assets returns the folder of the control plane's binaries from
// KUBEBUILDER_ASSETS. Unset, it returns why the tests that need it skip;
// set to a folder without them, an error; both say how to get them.
func Assets() (dir, skip string, err error) {
	dir = os.Getenv(AssetsVar)
	if dir == "" {
		return "", AssetsVar + " is not set: " + controlplane.HowToGet, nil
	}
	if err := controlplane.Check(dir); err != nil {
		return "", "", fmt.Errorf("%s=%s: %w", AssetsVar, dir, err)
	}
	return dir, "", nil
}

// RequireAssets returns the assets folder for a test that starts its
// processes itself (devenv.Start), skipping or failing t as Get does.
func RequireAssets(t testing.TB) string {
	t.Helper()
	dir, skip, err := Assets()
	switch {
	case skip != "":
		t.Skip(skip)
	case err != nil:
		t.Fatal(err)
	}
	return dir
}

func start(o Options, assets string) (_ *Env, stop func(), err error) {
	name := o.Name
	if name == "" {
		name = "testenv"
	}
	repo, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "kvhint-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	defer func() {
		if err != nil {
			stop()
			err = fmt.Errorf("%s: %w", name, err)
		}
	}()
	co := controlplane.Options{
		Assets:                assets,
		Dir:                   dir,
		ProductCRDs:           o.ProductCRDs,
		CRDs:                  o.CRDs,
		AdmitAsClusters:       o.AdmitAsClusters,
		KubeControllerManager: o.KubeControllerManager,
		Kwok:                  o.Kwok,
	}
	if o.DynamoCRD {
		co.CRDPaths = []string{dynamo.CRDPath(repo)}
	}
	cp, err := controlplane.Start(co)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopping the control plane: %v\n", name, err)
		}
	})
	env := &Env{ControlPlane: cp, Dir: dir, Repo: repo, Scheme: o.Scheme}
	if env.Scheme == nil {
		env.Scheme = runtime.NewScheme()
		err = errors.Join(clientgoscheme.AddToScheme(env.Scheme), v1alpha1.AddToScheme(env.Scheme), dynamo.AddToScheme(env.Scheme))
		if err != nil {
			return nil, nil, err
		}
	}
	if env.Client, err = client.New(cp.Config, client.Options{Scheme: env.Scheme}); err != nil {
		return nil, nil, err
	}
	if env.Kube, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, nil, err
	}
	if o.Setup != nil {
		stopSetup, err := o.Setup(env)
		if err != nil {
			return nil, nil, fmt.Errorf("setting up: %w", err)
		}
		if stopSetup != nil {
			stops = append(stops, stopSetup)
		}
	}
	return env, stop, nil
}

// InstallDynamoCRD installs test/dynamo's DynamoGraphDeployment CRD and
// waits until it is served.
func (e *Env) InstallDynamoCRD() error {
	return e.InstallCRDs(dynamo.CRDPath(e.Repo))
}

// RepoRoot returns the root of the kv-hint-operator module, searched
// upwards from the working directory (a test runs in its package's folder).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; {
		mod, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module github.com/kvrouter/kv-hint-operator\n") {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no kv-hint-operator go.mod in %s or above", dir)
		}
		d = parent
	}
}

var loggerOnce sync.Once

// setLogger gives controller-runtime a logger, to stderr with
// KVHINT_TEST_LOG set, else discarded (without one it prints a warning
// with a stack trace).
func setLogger() {
	loggerOnce.Do(func() {
		out := io.Discard
		if os.Getenv("KVHINT_TEST_LOG") != "" {
			out = os.Stderr
		}
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(out)))
	})
}

// Eventually polls check until it returns nil, and fails t after timeout
// with what it waited for and check's last error. check's context ends at
// the timeout. The poll starts at 10 ms and slows to 100 ms.
func Eventually(t testing.TB, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	if err := Poll(timeout, check); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// Poll is Eventually's loop, for a test that goes on when the check does
// not hold: nil once check returns nil, else check's last error after
// timeout.
func Poll(timeout time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	interval := 10 * time.Millisecond
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(interval):
		}
		if interval < 100*time.Millisecond {
			interval *= 2
		}
	}
}

// Kubectl runs the assets' kubectl (hack/envtest-assets.sh builds it
// beside kube-apiserver) as the cluster admin, and returns its output;
// an error fails t with that output.
func (e *Env) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// RunKubectl is Kubectl for a test that checks a refusal, or that runs
// kubectl off the test's goroutine: it returns kubectl's output, spaces
// trimmed, and its error.
func (e *Env) RunKubectl(args ...string) (string, error) {
	out, err := e.kubectl(args...)
	return strings.TrimSpace(string(out)), err
}

func (e *Env) kubectl(args ...string) ([]byte, error) {
	return exec.Command(filepath.Join(e.Assets, "kubectl"), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...).CombinedOutput()
}
