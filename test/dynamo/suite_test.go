package dynamo_test

import (
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
)

// One kube-apiserver and etcd with the DynamoGraphDeployment CRD, and one
// manager running the stand-in; each test works in a namespace of its own.
// No kube-controller-manager runs: the tests write a Deployment's status
// themselves where they need one.
var k8s client.Client // uncached: what the API server holds now

// timeout bounds every wait on the stand-in.
const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{
		Name:      "dynamo",
		DynamoCRD: true,
		Scheme:    dynamo.NewScheme(),
		Setup: func(env *testenv.Env) (func(), error) {
			k8s = env.Client
			stop, err := dynamo.Start(env.Config)
			if err != nil {
				return nil, err
			}
			return func() {
				if err := stop(); err != nil {
					os.Stderr.WriteString("dynamo: the stand-in stopped with: " + err.Error() + "\n")
				}
			}, nil
		},
	}))
}
