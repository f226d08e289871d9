// Package gitops_test checks what GitOps tools make of the product's
// files and objects: the Argo CD snippet of config/argocd installed as
// docs/gitops.md says, its health scripts run as Argo CD runs them, and
// its ignoreDifferences run as Argo CD's jq, and what kstatus and the
// health scripts make of the objects the manager writes status on, before
// the manager processes them, after, and right after a change
// (TestGitopsStatus, which runs a manager of its own).
package gitops_test

import (
	"os"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// Only TestArgoCDConfigMapSnippet and TestGitopsStatus need an API server:
// it starts at the first testenv.Get.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{Name: "gitops", ProductCRDs: true, Lazy: true}))
}
