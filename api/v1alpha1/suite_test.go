package v1alpha1_test

import (
	"os"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// The API's own suite: the CRDs of config/crd served by a real
// kube-apiserver, no manager. What the API server alone decides (the CEL
// and schema rules, the field documentation, the selectable fields) is
// tested here, beside the types that declare it; what the manager makes
// of an object is tested in controllers/.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{Name: "api", ProductCRDs: true}))
}
