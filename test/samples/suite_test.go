// Package samples_test applies config/samples to a real API server with
// the manager running, as a user would, and checks that they become
// Ready, and config/samples/invalid, each file with the reason it gets
// (internal/testing/invalidsamples, which test/gitops reads too).
package samples_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/testing/managertest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// k8s is the suite's uncached client, as the cluster admin.
var k8s client.Client

// timeout bounds every wait on the manager.
const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	scheme, err := controllers.NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, "samples:", err)
		os.Exit(1)
	}
	os.Exit(testenv.Run(m, testenv.Options{
		Name:        "samples",
		ProductCRDs: true,
		Scheme:      scheme,
		Setup: func(env *testenv.Env) (func(), error) {
			k8s = env.Client
			return managertest.Start(env.Config, managertest.Options{Name: "samples", Scheme: scheme})
		},
	}))
}
