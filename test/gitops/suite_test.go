// Package gitops_test checks what GitOps tools make of the product's
// files and objects: the Argo CD snippet of config/argocd installed as
// docs/gitops.md says, its health scripts run as Argo CD runs them, and
// its ignoreDifferences run as Argo CD's jq. What they make of the
// objects the manager writes status on, before and after it restarts, is
// tested with the manager, in controllers/.
package gitops_test

import (
	"os"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// Only TestArgoCDConfigMapSnippet needs an API server: it starts at the
// first testenv.Get.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{Name: "gitops", ProductCRDs: true, Lazy: true}))
}
